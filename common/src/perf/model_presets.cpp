// The planner's named models (mgpu/perf/model_presets.h), with the papers their shapes come
// from.
#include "mgpu/perf/model_presets.h"

#include "mgpu/error.h"

namespace mgpu::perf {

std::vector<std::string> model_preset_names() {
  return {"tiny", "gpt2-small", "gpt3-6.7b", "gpt-tiny-moe", "mixtral-8x7b", "deepseek-v3-like"};
}

ModelShape model_preset(const std::string& name) {
  // Lesson 12's gpt-tiny; GPT-2 small; GPT-3 6.7B ("Language Models are Few-Shot Learners",
  // Table 2.1: 32 layers, d = 4096, 32 heads, 2048 tokens of context): learned positions and
  // the tied head of lesson 12's GPT.
  if (name == "tiny") return ModelShape{65, 128, 4, 4, 128, 128};
  if (name == "gpt2-small") return ModelShape{50257, 1024, 12, 12, 768, 1024};
  if (name == "gpt3-6.7b") return ModelShape{50257, 2048, 32, 32, 4096, 2048};
  if (name == "gpt-tiny-moe") {  // lesson 16: gpt-tiny, 4 experts (hidden 4C), k = 2, blocks 1, 3
    ModelShape m{65, 128, 4, 4, 128, 128};
    m.moe.experts = 4;
    m.moe.top_k = 2;
    m.moe.first_dense = 1;
    m.moe.every = 2;
    return m;
  }
  if (name == "mixtral-8x7b") {
    // "Mixtral of Experts" (Table 1): 32 layers, dim 4096, 32 heads of 128 with 8 KV heads,
    // SwiGLU experts of hidden 14336, 8 experts, k = 2, vocabulary 32000, context 32768;
    // RMSNorm, rotary positions, no biases, an untied head. Attention: Q and O 4096², K and
    // V 4096 x 1024 (8 KV heads of 128).
    ModelShape m{32000, 4096, 32, 32, 4096, 32768};
    m.gated_mlp = true;
    m.biases = false;
    m.rotary = true;
    m.tied_head = false;
    m.attention_params = 2.0 * 4096 * 4096 + 2.0 * 4096 * 1024;
    m.moe.experts = 8;
    m.moe.top_k = 2;
    m.moe.expert_hidden = 14336;
    return m;
  }
  if (name == "deepseek-v3-like") {
    // "DeepSeek-V3 Technical Report" (section 4.2, and its config): 61 layers, hidden 7168,
    // the first 3 dense (SwiGLU of 18432), the other 58 MoE with 256 routed experts and 1
    // shared of hidden 2048, k = 8; vocabulary 129280, untied head, RMSNorm, no biases.
    // Multi-head latent attention, 128 heads: Q down 7168 x 1536 and up 1536 x 128·192, KV
    // down 7168 x (512 + 64) and up 512 x 128·256, output 128·128 x 7168, two latent norms.
    // "Like": MLA's parameters stand in as a number (the planner's attention FLOPs and
    // activations are lesson 12's multi-head attention of 128 heads), the multi-token
    // prediction module is left out (the report's 671B leave it out too), and the context is
    // 4096 tokens, the report's pre-training length.
    ModelShape m{129280, 4096, 61, 128, 7168, 4096};
    m.ffn_hidden = 18432;
    m.gated_mlp = true;
    m.biases = false;
    m.rotary = true;
    m.tied_head = false;
    m.attention_params = 7168.0 * 1536 + 1536 + 1536.0 * 128 * 192 + 7168.0 * 576 + 512 +
                         512.0 * 128 * 256 + 128.0 * 128 * 7168;
    m.moe.experts = 256;
    m.moe.top_k = 8;
    m.moe.shared_experts = 1;
    m.moe.expert_hidden = 2048;
    m.moe.first_dense = 3;
    return m;
  }
  std::string names;
  for (const std::string& n : model_preset_names()) names += (names.empty() ? "" : ", ") + n;
  MGPU_FAIL("no model preset '", name, "' (there are: ", names, ")");
}

}  // namespace mgpu::perf
