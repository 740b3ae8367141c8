mod common;
use common::*;
use wick::exec::Readback;
use wick::SessionOptions;
#[test]
fn dump() {
    let name = std::env::var("M").unwrap();
    let toks: Vec<u32> = std::env::var("T").unwrap().split(',').map(|s| s.parse().unwrap()).collect();
    let model = load_cpu(&name);
    let mut s = model.session(SessionOptions { n_ctx: 256, ..Default::default() }).unwrap();
    let out = block_on(s.eval(&toks, Readback::AllLogits)).unwrap();
    let bytes: Vec<u8> = out.logits.iter().flat_map(|f| f.to_le_bytes()).collect();
    std::fs::write("/tmp/wick_logits.bin", bytes).unwrap();
}
#[test]
fn write_real_shape() {
    use wick::gguf::GgufReader;
    use wick::source::FileSource;
    let donor = block_on(async {
        GgufReader::open(FileSource::open(model_path(SMOLLM2)).await.unwrap()).await.unwrap().into_header().metadata
    });
    let mut spec = wick::synth::SynthSpec::tiny(wick::model::Arch::Llama, 7);
    spec.n_embd = 576; spec.n_head = 9; spec.n_head_kv = 3; spec.head_dim = 64; spec.n_ff = 1536;
    spec.n_layer = std::env::var("L").map(|v| v.parse().unwrap()).unwrap_or(30);
    spec.tied = std::env::var("TIED").is_ok();
    spec.matrix_type = wick::quant::GgmlType::F32; spec.embd_type = wick::quant::GgmlType::F32;
    let f = std::fs::File::create("/tmp/syn/real.gguf").unwrap();
    wick::synth::write(std::io::BufWriter::new(f), &spec, &donor).unwrap();
}
#[test]
fn embd_row() {
    let model_name = std::env::var("M").unwrap();
    let model = load_cpu(&model_name);
    let mut s = model.session(SessionOptions { n_ctx: 256, ..Default::default() }).unwrap();
    let _ = block_on(s.eval(&[504], Readback::Argmax));
}
