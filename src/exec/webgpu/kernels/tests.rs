//! Tests of the kernels' composition: every variant composes and passes naga's validator.

use super::*;

/// The renamed copies of the weight functions are complete: every function of the first
/// copy has a `_2` twin, and no module constant is declared twice.
#[test]
fn second_matrix_renames_every_function() {
    let src = [WEIGHTS, WVIEW_F32, MATVEC_LEGACY, MATVEC_KQUANT, MATVEC_FLOAT].concat();
    let copy = suffixed(&src, "2");
    for piece in src.split("fn ").skip(1) {
        let name: String = piece.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        assert!(copy.contains(&format!("fn {name}_2(")), "{name} has no copy");
    }
    assert!(!copy.contains("const "));
    assert!(copy.contains("w2[") && !copy.contains(" w["));
}

/// Each segment of the three-product kernel calls its own matrix's functions.
#[test]
fn multi_segments_use_their_matrices() {
    let k = Kernel::MatMulMulti([GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::Q6_K], [4, 1, 2], false);
    let (src, entry) = k.source(false).unwrap();
    assert_eq!(entry, "main_multi");
    let seg = |i: usize| {
        let start = src.find(&format!("fn seg_{i}(")).unwrap_or(0);
        src[start..].split("\n}\n").next().unwrap_or("").to_string()
    };
    assert!(seg(1).contains("dot_q4_k(o3,") && seg(1).contains("store_1("));
    assert!(seg(2).contains("dot_q8_0_2(o0,") && !seg(2).contains("o1"));
    assert!(seg(3).contains("dot_q6_k_3(o1,") && seg(3).contains("p.rb_c"));
}

/// The smallest tile, in stages of 64 values, fits WebGPU's default workgroup memory (16 KiB) for every type.
#[test]
fn small_tiles_fit_the_default_workgroup_memory() {
    for t in SUPPORTED.into_iter().filter(|&t| tiled_type(t)) {
        assert!(TileShape { rt: 4, ct: 4, sp: 4 }.workgroup_bytes(t) <= 16384, "{t}");
    }
}

/// Every kernel variant, on both precision paths, composes and passes naga's WGSL front
/// end and validator (what wgpu runs natively before handing a module to the driver), with
/// its entry point present: a broken composition fails here, without a GPU.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn every_kernel_composes_and_validates() {
    use naga::valid::{Capabilities, ValidationFlags, Validator};
    let mut failures = Vec::new();
    for f16 in [false, true] {
        for k in all_kernels() {
            let (src, entry) = k.source(f16).unwrap();
            let module = match naga::front::wgsl::parse_str(&src) {
                Ok(m) => m,
                Err(e) => {
                    failures.push(format!("{k:?} f16={f16}: {}", e.emit_to_string(&src)));
                    continue;
                }
            };
            if let Err(e) = Validator::new(ValidationFlags::all(), Capabilities::all()).validate(&module) {
                failures.push(format!("{k:?} f16={f16}: {}", e.emit_to_string(&src)));
            }
            if !module.entry_points.iter().any(|e| e.name == entry) {
                failures.push(format!("{k:?} f16={f16}: no entry point {entry}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// No kernel declares a `var` without initializer in a loop body. WGSL makes such a variable a
/// fresh zero at every iteration, but Chromium's compiler (seen in Chromium 156 on SwiftShader)
/// zeroes it once per invocation, as naga did before wgpu 30 (gfx-rs/wgpu#9489): the scores of
/// attention_tiled.wgsl carried over from one key tile to the next in the browser only, where
/// no native run can see it. Zero such a variable by hand at the top of the body instead.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn no_uninitialized_var_in_loops() {
    let mut failures = Vec::new();
    for f16 in [false, true] {
        for k in all_kernels() {
            let (src, _) = k.source(f16).unwrap();
            for decl in loop_local_zero_vars(&src) {
                failures.push(format!("{k:?} f16={f16}: `{decl}`"));
            }
        }
    }
    assert!(failures.is_empty(), "loop-local `var`s without initializer:\n{}", failures.join("\n"));
}

/// The check itself: it finds the declaration in a loop body, however deep, and nowhere else.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn loop_local_zero_vars_are_found() {
    let src = "var<workgroup> w: array<f32, 4>;\n\
               fn f() {\n    var a: f32;\n    for (var i = 0u; i < 4u; i++) {\n        var b = 0.0;\n\
               if (i > 1u) {\n            var c: array<f32, 4>; // here\n        }\n    }\n\
               loop {\n        var d: vec4<f32>;\n        break;\n    }\n    var e: f32;\n}\n";
    assert_eq!(loop_local_zero_vars(src), ["var c: array<f32, 4>", "var d: vec4<f32>"]);
}

/// The declarations of a `var` with no initializer inside a loop body (for, loop, while) in
/// WGSL source `src`, as written.
#[cfg(not(target_arch = "wasm32"))]
fn loop_local_zero_vars(src: &str) -> Vec<String> {
    // Per open brace: whether it is a loop body or inside one.
    let mut in_loop: Vec<bool> = Vec::new();
    let mut found = Vec::new();
    let mut stmt = String::new();
    let mut parens = 0usize;
    for line in src.lines() {
        for c in line.split("//").next().unwrap_or("").chars() {
            match c {
                '(' | ')' => {
                    parens = if c == '(' { parens + 1 } else { parens.saturating_sub(1) };
                    stmt.push(c);
                }
                '{' => {
                    let mut words = stmt.split(|c: char| !c.is_ascii_alphanumeric() && c != '_');
                    let is_loop = words.any(|w| matches!(w, "for" | "loop" | "while"));
                    in_loop.push(is_loop || in_loop.last() == Some(&true));
                    stmt.clear();
                }
                '}' => {
                    in_loop.pop();
                    stmt.clear();
                }
                // A for loop's header holds semicolons of its own.
                ';' if parens == 0 => {
                    let s = stmt.trim();
                    let var = s.strip_prefix("var").is_some_and(|r| r.starts_with([' ', '<']));
                    if var && !s.contains('=') && in_loop.last() == Some(&true) {
                        found.push(s.to_string());
                    }
                    stmt.clear();
                }
                _ => stmt.push(c),
            }
        }
        stmt.push(' ');
    }
    found
}

/// Every kernel variant the executor can ask for (the tests compose and validate each).
#[cfg(not(target_arch = "wasm32"))]
fn all_kernels() -> Vec<Kernel> {
    let mut ks = Vec::new();
    for q in [ActQuant::Q8_1, ActQuant::Q8K] {
        ks.extend([Kernel::Quantize(q), Kernel::NormQuant(q)]);
    }
    let mvs = [
        MatVec::Rows,
        MatVec::Coop { rows: 1, subgroup: false },
        MatVec::Coop { rows: 2, subgroup: true },
        MatVec::Coop { rows: 4, subgroup: false },
        MatVec::Coop { rows: 4, subgroup: true },
    ];
    for t in SUPPORTED {
        ks.push(Kernel::Embed(t));
        if tiled_type(t) {
            for (rt, ct) in TileShape::ALL {
                for sp in [2, 4] {
                    ks.push(Kernel::MatMulTiled(t, TileShape { rt, ct, sp }));
                }
            }
        }
        for mv in mvs {
            ks.push(Kernel::MatMul(t, mv));
            if mv != MatVec::Rows {
                ks.push(Kernel::MatMulGated(t, mv));
            }
        }
    }
    for (i, t) in SUPPORTED.iter().enumerate() {
        // Each type in each of the three places, with the row counts and reductions varied.
        let other = SUPPORTED[(i + 5) % SUPPORTED.len()];
        let sg = i % 2 == 0;
        ks.push(Kernel::MatMulMulti([*t, other, GgmlType::Q6_K], [4, 1, 2], sg));
        ks.push(Kernel::MatMulMulti([other, *t, GgmlType::Q8_0], [1, 2, 4], !sg));
        ks.push(Kernel::MatMulMulti([GgmlType::Q4_K, other, *t], [2, 4, 1], sg));
    }
    ks.extend([
        Kernel::RmsNorm(false),
        Kernel::RmsNorm(true),
        Kernel::Rope,
        Kernel::RopeTable,
        Kernel::RopeKv,
        Kernel::KvStore,
        Kernel::KvShift,
        Kernel::Attention,
        Kernel::GatedSilu,
        Kernel::GatedGelu,
        Kernel::Add,
        Kernel::Argmax,
        Kernel::ArgmaxFinal,
        Kernel::TakeLast,
    ]);
    for heads in [1, 2, 4, 8] {
        for dims in [64, 80, 128, 256] {
            ks.push(Kernel::AttentionSplit { heads, dims });
        }
    }
    for dims in [64, 80, 128, 256] {
        ks.push(Kernel::AttentionCombine { dims });
    }
    for (pairs, chunks) in [(32, 1), (32, 2), (32, 3), (32, 4), (16, 4)] {
        for keys in [32, 64] {
            ks.push(Kernel::AttentionTiled(Tiles { pairs, keys, chunks }));
        }
    }
    ks
}
