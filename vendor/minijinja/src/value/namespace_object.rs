use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::error::{Error, ErrorKind};
use crate::value::{DynObject, Enumerator, Object, ObjectRepr, Value};

/// This object exists for the `namespace` function.
///
/// It's special in that it behaves like a dictionary in many ways but it's the only
/// object that can be used with `{% set %}` assignments.  This is used internally
/// in the vm via downcasting.
#[derive(Debug, Default)]
pub(crate) struct Namespace {
    data: Mutex<BTreeMap<Arc<str>, Value>>,
}

impl Object for Namespace {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.data.lock().unwrap().get(some!(key.as_str())).cloned()
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        let data = self.data.lock().unwrap();
        let keys = data.keys().cloned().map(Value::from);
        Enumerator::Values(keys.collect())
    }
}

impl Namespace {
    pub(crate) fn set_value(&self, key: &str, value: Value) {
        self.data.lock().unwrap().insert(key.into(), value);
    }
}

/// Fails if `value` holds `target` (at any depth): assigning it into `target`
/// would make a reference cycle.  Walks at most `MAX_CHECKED` items.
pub(crate) fn refuse_cycle(target: &DynObject, value: &Value) -> Result<(), Error> {
    const MAX_CHECKED: usize = 1 << 20;
    const MAX_DEPTH: usize = 128;
    fn walk(target: &DynObject, v: &Value, seen: &mut usize, depth: usize) -> Result<(), Error> {
        let Some(obj) = v.as_object() else {
            return Ok(());
        };
        if obj.is_same_object(target) {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "a namespace cannot hold itself",
            ));
        }
        *seen += 1;
        if *seen > MAX_CHECKED || depth > MAX_DEPTH {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "value too large or too deep to assign to a namespace",
            ));
        }
        match obj.repr() {
            ObjectRepr::Map => {
                for (k, item) in obj.try_iter_pairs().into_iter().flatten() {
                    ok!(walk(target, &k, seen, depth + 1));
                    ok!(walk(target, &item, seen, depth + 1));
                }
            }
            ObjectRepr::Seq | ObjectRepr::Iterable if obj.enumerator_len().is_some() => {
                for item in obj.try_iter().into_iter().flatten() {
                    ok!(walk(target, &item, seen, depth + 1));
                }
            }
            _ => {}
        }
        Ok(())
    }
    walk(target, value, &mut 0, 0)
}
