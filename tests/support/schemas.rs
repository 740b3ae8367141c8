//! The JSON schemas of the structured-output tests, shared by the native generation test
//! (`structured_output.rs`) and the browser one (`web_constrain.rs`), so that both builds are
//! shown to accept the same schemas.

use serde_json::{json, Value};

/// (what to ask for, schema). Strings carry `maxLength` and arrays `maxItems`, so that every
/// generation finishes well within its token budget.
pub fn schemas() -> Vec<(&'static str, Value)> {
    let name = json!({"type": "string", "minLength": 1, "maxLength": 24});
    vec![
        (
            "a person with name and age",
            json!({"type": "object", "properties": {"name": name, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
                   "required": ["name", "age"], "additionalProperties": false}),
        ),
        (
            "a person with an address",
            json!({"type": "object", "properties": {
                "name": name,
                "address": {"type": "object", "properties": {
                    "city": name, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["city", "zip"], "additionalProperties": false}},
                "required": ["name", "address"], "additionalProperties": false}),
        ),
        (
            "a list of three fruits",
            json!({"type": "object", "properties": {"fruits": {"type": "array", "items": name, "minItems": 1, "maxItems": 4}},
                   "required": ["fruits"], "additionalProperties": false}),
        ),
        (
            "the colour of the sky",
            json!({"type": "object", "properties": {"color": {"enum": ["red", "green", "blue", "yellow"]}},
                   "required": ["color"], "additionalProperties": false}),
        ),
        (
            "a product with price and stock flag",
            json!({"type": "object", "properties": {
                "product": name,
                "price": {"type": "number", "exclusiveMinimum": 0, "maximum": 1000},
                "in_stock": {"type": "boolean"}},
                "required": ["product", "price", "in_stock"], "additionalProperties": false}),
        ),
        (
            "an id that is a number or a string",
            json!({"type": "object", "properties": {"id": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 99999}, {"type": "string", "maxLength": 12}]}},
                   "required": ["id"], "additionalProperties": false}),
        ),
        (
            "two points",
            json!({"$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer", "minimum": -100, "maximum": 100}, "y": {"type": "integer", "minimum": -100, "maximum": 100}},
                                       "required": ["x", "y"], "additionalProperties": false}},
                   "type": "object", "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"$ref": "#/$defs/point"}},
                   "required": ["a", "b"], "additionalProperties": false}),
        ),
        (
            "a list of books with title and year",
            json!({"type": "object", "properties": {"books": {"type": "array", "maxItems": 3, "items": {
                "type": "object", "properties": {"title": name, "year": {"type": "integer", "minimum": 1450, "maximum": 2030}},
                "required": ["title", "year"], "additionalProperties": false}}},
                "required": ["books"], "additionalProperties": false}),
        ),
        (
            "a status",
            json!({"type": "object", "properties": {"status": {"const": "ok"}, "code": {"type": "integer", "enum": [200, 201, 204]}},
                   "required": ["status", "code"], "additionalProperties": false}),
        ),
        (
            "a 2x2 matrix of small integers",
            json!({"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "array", "minItems": 2, "maxItems": 2,
                   "items": {"type": "integer", "minimum": -9, "maximum": 9}}}),
        ),
        (
            "a user with an optional nickname",
            json!({"type": "object", "properties": {"user": name, "nickname": name, "admin": {"type": "boolean"}},
                   "required": ["user"], "additionalProperties": false}),
        ),
        (
            "a flight code",
            json!({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"}},
                   "required": ["code"], "additionalProperties": false}),
        ),
        (
            "a meeting date",
            json!({"type": "object", "properties": {"title": name, "date": {"type": "string", "format": "date"}},
                   "required": ["title", "date"], "additionalProperties": false}),
        ),
        (
            "a contact that may have no email",
            json!({"type": "object", "properties": {"name": name, "email": {"type": ["string", "null"], "maxLength": 30}},
                   "required": ["name", "email"], "additionalProperties": false}),
        ),
        (
            "an item with a name and a quantity",
            json!({"allOf": [
                {"type": "object", "properties": {"item": name}, "required": ["item"]},
                {"type": "object", "properties": {"qty": {"type": "integer", "minimum": 1, "maximum": 50}}, "required": ["qty"]}]}),
        ),
        (
            "an even number of eggs",
            json!({"type": "object", "properties": {"eggs": {"type": "integer", "multipleOf": 2, "minimum": 0, "maximum": 24}},
                   "required": ["eggs"], "additionalProperties": false}),
        ),
        (
            "word counts",
            json!({"type": "object", "patternProperties": {"^[a-z]{1,10}$": {"type": "integer", "minimum": 0, "maximum": 99}},
                   "additionalProperties": false, "minProperties": 1, "maxProperties": 3}),
        ),
        (
            "a small tree of names",
            // A top-level `$ref`, and `$ref`s between definitions (not recursive: a small model
            // greedily nests a recursive tree until the budget runs out).
            json!({"$defs": {
                    "leaf": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}},
                             "required": ["name"], "additionalProperties": false},
                    "node": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                             "children": {"type": "array", "maxItems": 3, "items": {"$ref": "#/$defs/leaf"}}},
                             "required": ["name", "children"], "additionalProperties": false}},
                   "$ref": "#/$defs/node"}),
        ),
        (
            "a shape: a circle or a square",
            json!({"oneOf": [
                {"type": "object", "properties": {"kind": {"const": "circle"}, "radius": {"type": "integer", "minimum": 1, "maximum": 50}},
                 "required": ["kind", "radius"], "additionalProperties": false},
                {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "integer", "minimum": 1, "maximum": 50}},
                 "required": ["kind", "side"], "additionalProperties": false}]}),
        ),
        (
            "a pair of a word and a number",
            json!({"type": "array", "prefixItems": [name, {"type": "integer", "minimum": 0, "maximum": 1000}], "items": false, "minItems": 2}),
        ),
        (
            "a temperature reading",
            json!({"type": "object", "properties": {"celsius": {"type": "number", "minimum": -90, "maximum": 60}, "unit": {"enum": ["C"]}},
                   "required": ["celsius", "unit"], "additionalProperties": false}),
        ),
        (
            "a short summary",
            json!({"type": "object", "properties": {"summary": {"type": "string", "minLength": 5, "maxLength": 40}, "tags": {"type": "array", "items": {"enum": ["news", "sport", "tech"]}, "maxItems": 3}},
                   "required": ["summary", "tags"], "additionalProperties": false}),
        ),
        (
            "a server setting",
            json!({"type": "object", "properties": {
                "host": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,15}$"},
                "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                "tls": {"type": "boolean"}},
                   "required": ["host", "port", "tls"], "additionalProperties": false}),
        ),
        (
            "two or three lowercase tags",
            json!({"type": "array", "items": {"type": "string", "pattern": "^[a-z]{2,10}$"}, "minItems": 2, "maxItems": 3}),
        ),
        (
            "a review with a score",
            json!({"type": "object", "properties": {
                "kind": {"const": "review"},
                "stars": {"type": "integer", "minimum": 1, "maximum": 5},
                "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 10},
                "at": {"type": "string", "format": "date"}},
                   "required": ["kind", "stars", "score", "at"], "additionalProperties": false}),
        ),
    ]
}
