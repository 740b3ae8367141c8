//! Fuzz hyperparameter validation: metadata keys and values from the input, then
//! `Hparams::from_metadata`. Any input must give `Ok` or `Err`, never a panic; what it accepts
//! must be usable (no zero sizes, finite RoPE values).
//!
//! Input: lines `key=value`; a value that parses as an integer becomes a U32 (I64 if negative
//! or large), as a float an F32, `[a,b,...]` an array of F32, otherwise a string. A key
//! without a prefix gets the architecture's (`general.architecture`, default `llama`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use wick::gguf::{MetaArray, MetaValue, Metadata};
use wick::model::Hparams;

fn value(v: &str) -> MetaValue {
    if let Ok(i) = v.parse::<i64>() {
        return match u32::try_from(i) {
            Ok(u) => MetaValue::U32(u),
            Err(_) => MetaValue::I64(i),
        };
    }
    if let Ok(f) = v.parse::<f32>() {
        return MetaValue::F32(f);
    }
    if let Some(list) = v.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
        return MetaValue::Array(MetaArray::F32(
            list.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        ));
    }
    match v {
        "true" => MetaValue::Bool(true),
        "false" => MetaValue::Bool(false),
        _ => MetaValue::Str(v.to_string()),
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let pairs: Vec<(&str, &str)> = text.lines().filter_map(|l| l.split_once('=')).collect();
    let arch = pairs.iter().find(|(k, _)| *k == "general.architecture").map_or("llama", |(_, v)| *v);
    let mut md = Metadata::new();
    md.insert("general.architecture", MetaValue::Str(arch.to_string()));
    for (k, v) in pairs {
        let key = if k.contains('.') { k.to_string() } else { format!("{arch}.{k}") };
        md.insert(key, value(v));
    }
    let _ = Hparams::from_metadata(&md);
});
