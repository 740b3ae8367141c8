// Greedy generation with llama.cpp's C API on any of its backends, as
// make_llamacpp_refs.py does through llama-cpp-python on the CPU: the prompt in one batch,
// then one token a decode. Used to measure how far llama.cpp's own CUDA backend (or a CPU
// build with other SIMD) agrees with the CPU references in tests/data/generation_refs.json:
// the yardstick for wick's GPU executors (compare_greedy.py).
//
// Build against a llama.cpp build tree B (source tree S):
//   g++ -O2 -std=c++17 llama_greedy.cpp -IS/include -IS/ggml/include -LB/bin -lllama -lggml \
//       -lggml-base -Wl,-rpath,B/bin -o llama_greedy
// Run: llama_greedy MODEL N_GPU_LAYERS FLASH_ATTN(0|1) < prompts > out
// Input lines: "N id id id ..." (N greedy tokens after the prompt ids).
// Output lines: "greedy id ...", "gaps g ...", "top id:logit ..." (32 at the last prompt position).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

int main(int argc, char ** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s MODEL N_GPU_LAYERS FLASH_ATTN < prompts\n", argv[0]);
        return 2;
    }
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = std::atoi(argv[2]);
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        std::fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 1024;
    cp.n_batch = 512;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    cp.flash_attn_type = std::atoi(argv[3]) ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context * ctx = llama_init_from_model(model, cp);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int nv = llama_vocab_n_tokens(vocab);

    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        int n = 0;
        in >> n;
        std::vector<llama_token> ids;
        for (llama_token t; in >> t;) ids.push_back(t);
        if (ids.empty()) continue;
        llama_memory_clear(llama_get_memory(ctx), true);
        if (llama_decode(ctx, llama_batch_get_one(ids.data(), (int32_t) ids.size())) != 0) return 1;
        std::vector<int> order(nv);
        std::string greedy = "greedy", gaps = "gaps", top = "top";
        for (int i = 0; i < n; i++) {
            const float * l = llama_get_logits_ith(ctx, -1);
            for (int j = 0; j < nv; j++) order[j] = j;
            std::partial_sort(order.begin(), order.begin() + 32, order.end(),
                              [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
            if (i == 0) {
                for (int j = 0; j < 32; j++) top += " " + std::to_string(order[j]) + ":" + std::to_string(l[order[j]]);
            }
            llama_token next = order[0];
            greedy += " " + std::to_string(next);
            gaps += " " + std::to_string(l[order[0]] - l[order[1]]);
            if (llama_vocab_is_eog(vocab, next)) break;
            if (llama_decode(ctx, llama_batch_get_one(&next, 1)) != 0) return 1;
        }
        std::printf("%s\n%s\n%s\n", greedy.c_str(), gaps.c_str(), top.c_str());
        std::fflush(stdout);
    }
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
