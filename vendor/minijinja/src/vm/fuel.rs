use crate::compiler::instructions::Instruction;
use crate::error::{Error, ErrorKind};
use crate::value::{ObjectRepr, Value, ValueKind, ValueRepr};

use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;

/// Helper for tracking fuel consumption
pub struct FuelTracker {
    // The initial fuel level.
    initial: u64,
    // This should be an AtomicI64 but sadly 32bit targets do not necessarily have
    // AtomicI64 available.
    remaining: AtomicIsize,
}

impl FuelTracker {
    /// Creates a new fuel tracker.
    ///
    /// The fuel tracker is always wrapped in an `Arc` so that it can be
    /// shared across nested invocations of the template evaluation.
    pub fn new(fuel: u64) -> Arc<FuelTracker> {
        Arc::new(FuelTracker {
            initial: fuel,
            remaining: AtomicIsize::new(fuel as isize),
        })
    }

    /// Tracks an instruction.  If it runs out of fuel an error is returned.
    pub fn track(&self, instr: &Instruction) -> Result<(), Error> {
        let fuel_to_consume = fuel_for_instruction(instr);
        if fuel_to_consume != 0 {
            let old_fuel = self.remaining.fetch_sub(fuel_to_consume, Ordering::Relaxed);
            if old_fuel - fuel_to_consume <= 0 {
                return Err(Error::from(ErrorKind::OutOfFuel));
            }
        }
        Ok(())
    }

    /// Tracks the work of an instruction that reads `values` whole (a comparison,
    /// `in`, a filter, function or method call): one unit of fuel per
    /// [`BYTES_PER_FUEL`] bytes of their size, so scanning a large string or list
    /// over and over runs out of fuel as building it would run out of budget.
    pub fn track_work(&self, values: &[Value]) -> Result<(), Error> {
        let left = self.remaining.load(Ordering::Relaxed).max(0) as usize;
        let limit = left.saturating_mul(BYTES_PER_FUEL).saturating_add(1);
        let mut seen = 0;
        for v in values {
            // values too deep to measure were refused when they were built
            let _ = approx_size(v, limit, &mut seen, 0, WORK_ITEM_SIZE);
        }
        let units = (seen / BYTES_PER_FUEL).min(isize::MAX as usize) as isize;
        if units != 0 {
            let old_fuel = self.remaining.fetch_sub(units, Ordering::Relaxed);
            if old_fuel.saturating_sub(units) <= 0 {
                return Err(Error::from(ErrorKind::OutOfFuel));
            }
        }
        Ok(())
    }

    /// Returns the remaining fuel.
    pub fn remaining(&self) -> u64 {
        self.remaining.load(Ordering::Relaxed) as _
    }

    /// Returns the consumed fuel.
    pub fn consumed(&self) -> u64 {
        self.initial.saturating_sub(self.remaining())
    }
}

/// Bytes of input a unit of fuel pays for in [`FuelTracker::track_work`].
pub const BYTES_PER_FUEL: usize = 256;

/// What an item of a list or map counts in [`FuelTracker::track_work`], on top of its own
/// size: two items a unit of fuel.  Reading (and measuring) an item costs far more time than
/// an instruction or a byte of a string, so at [`MIN_ITEM_SIZE`] a render could spend most
/// of a second reading a big list over and over on its fuel.
const WORK_ITEM_SIZE: usize = BYTES_PER_FUEL / 2;

/// How much fuel does an instruction consume?
fn fuel_for_instruction(instruction: &Instruction) -> isize {
    match instruction {
        Instruction::BeginCapture(_)
        | Instruction::PushLoop(_)
        | Instruction::PushDidNotIterate
        | Instruction::PushWith
        | Instruction::PopFrame
        | Instruction::PopLoopFrame
        | Instruction::DupTop
        | Instruction::DiscardTop
        | Instruction::PushAutoEscape
        | Instruction::PopAutoEscape => 0,
        #[cfg(feature = "multi_template")]
        Instruction::ExportLocals => 0,
        #[cfg(feature = "macros")]
        Instruction::LoadBlocks | Instruction::BuildMacro(..) | Instruction::Return => 0,
        _ => 1,
    }
}

/// Tracks the bytes a render builds against a budget (see
/// [`Environment::set_size_budget`](crate::Environment::set_size_budget)).
///
/// Every value an instruction makes (strings joined with `~`, `+` and `*`, lists
/// and maps, the results of filters, functions and methods) and everything written
/// to the output or to a captured block is charged by its size: roughly the length
/// of its string form, shared parts counted as often as they appear.  Operators are
/// charged before they run, so a string or list that doubles in a loop fails before
/// it is allocated.
pub struct SizeTracker {
    budget: u64,
    // `AtomicIsize` for the same reason as in `FuelTracker`; on 32-bit targets the
    // budget is clamped to `isize::MAX`.
    remaining: AtomicIsize,
}

impl SizeTracker {
    /// Creates a new size tracker with a budget in bytes.
    pub fn new(budget: u64) -> Arc<SizeTracker> {
        Arc::new(SizeTracker {
            budget,
            remaining: AtomicIsize::new(budget.min(isize::MAX as u64) as isize),
        })
    }

    /// Charges `bytes`; fails once the budget is spent.
    pub fn charge(&self, bytes: usize) -> Result<(), Error> {
        let bytes = bytes.min(isize::MAX as usize) as isize;
        let old = self.remaining.fetch_sub(bytes, Ordering::Relaxed);
        if old.saturating_sub(bytes) < 0 {
            self.remaining.store(-1, Ordering::Relaxed);
            return Err(Error::new(
                ErrorKind::SizeBudgetExceeded,
                format!("the template built more than {} bytes", self.budget),
            ));
        }
        Ok(())
    }

    /// Charges the size of `value`.
    pub fn charge_value(&self, value: &Value) -> Result<(), Error> {
        let size = ok!(self.measure(value));
        self.charge(size)
    }

    /// The size of `value`, counted no further than what is left of the budget
    /// (plus one), so measuring costs no more than the budget allows.
    /// Fails for values nested deeper than [`MAX_VALUE_DEPTH`].
    pub fn measure(&self, value: &Value) -> Result<usize, Error> {
        if let Some(s) = value.as_str() {
            // no quotes around a string on its own
            return Ok(s.len());
        }
        let left = self.remaining.load(Ordering::Relaxed).max(0) as usize;
        let mut seen = 0;
        ok!(approx_size(value, left.saturating_add(1), &mut seen, 0, MIN_ITEM_SIZE));
        Ok(seen)
    }

    /// Returns the bytes still left.
    pub fn remaining(&self) -> u64 {
        self.remaining.load(Ordering::Relaxed).max(0) as u64
    }

    /// Returns the bytes charged so far.
    pub fn consumed(&self) -> u64 {
        self.budget.saturating_sub(self.remaining())
    }
}

/// The bytes `a + b` or `a ~ b` (`op` "add") or `a * b` (`op` "mul") would build:
/// the sizes of the operands, or of the repeated operand times the count.
pub(crate) fn size_of_binop(
    tracker: &SizeTracker,
    op: &str,
    a: &Value,
    b: &Value,
) -> Result<usize, Error> {
    let repeated = |v: &Value| {
        v.as_str().is_some() || matches!(v.kind(), ValueKind::Seq | ValueKind::Iterable)
    };
    if op == "mul" {
        if let Some((v, n)) = if repeated(a) {
            Some((a, b))
        } else if repeated(b) {
            Some((b, a))
        } else {
            None
        } {
            let n = n.as_usize().unwrap_or(0);
            return Ok(ok!(tracker.measure(v)).saturating_mul(n));
        }
    }
    Ok(ok!(tracker.measure(a)).saturating_add(ok!(tracker.measure(b))))
}

/// What an item of a list or map counts at least, on top of its own size: a
/// value's slot, and its separator when printed.
const MIN_ITEM_SIZE: usize = 16;

/// How deeply the values a template builds may nest.  Printing, comparing and
/// dropping values recurse once per level, so a list wrapped in itself a million
/// times would overflow the stack (a wasm32 stack is 1 MiB).
pub const MAX_VALUE_DEPTH: usize = 128;

/// Adds about the length of `value`'s string form to `seen`, stopping once `seen`
/// reaches `limit`.  Each item counts at least `item` bytes, so this visits at most
/// `limit / item` items however deeply shared lists are nested.  Fails for values nested
/// deeper than [`MAX_VALUE_DEPTH`].
fn approx_size(
    value: &Value,
    limit: usize,
    seen: &mut usize,
    depth: usize,
    item: usize,
) -> Result<(), Error> {
    if *seen >= limit {
        return Ok(());
    }
    match value.0 {
        ValueRepr::String(ref s, _) => *seen = seen.saturating_add(s.len() + 2),
        ValueRepr::SmallStr(ref s) => *seen = seen.saturating_add(s.as_str().len() + 2),
        ValueRepr::Bytes(ref b) => *seen = seen.saturating_add(b.len() + 2),
        ValueRepr::Object(ref obj) => {
            *seen = seen.saturating_add(2);
            // every item counts at least MIN_ITEM_SIZE: a long list is over the
            // limit without walking it
            if let Some(n) = obj.enumerator_len() {
                if n == 0 {
                    return Ok(());
                }
                if n.saturating_mul(item) >= limit - *seen {
                    *seen = limit;
                    return Ok(());
                }
            }
            let items: Box<dyn Iterator<Item = Value>> = match obj.repr() {
                ObjectRepr::Map => Box::new(
                    obj.try_iter_pairs()
                        .into_iter()
                        .flatten()
                        .flat_map(|(k, v)| [k, v]),
                ),
                ObjectRepr::Seq | ObjectRepr::Iterable if obj.enumerator_len().is_some() => {
                    Box::new(obj.try_iter().into_iter().flatten())
                }
                _ => return Ok(()),
            };
            for v in items {
                if depth >= MAX_VALUE_DEPTH && matches!(v.0, ValueRepr::Object(_)) {
                    return Err(Error::new(
                        ErrorKind::SizeBudgetExceeded,
                        format!("the template built values nested deeper than {MAX_VALUE_DEPTH} levels"),
                    ));
                }
                *seen = seen.saturating_add(item);
                ok!(approx_size(&v, limit, seen, depth + 1, item));
                if *seen >= limit {
                    break;
                }
            }
        }
        _ => *seen = seen.saturating_add(8),
    }
    Ok(())
}
