//! Block formats: layouts, dequantization and dot products on the CPU.

mod types;

pub use types::GgmlType;
