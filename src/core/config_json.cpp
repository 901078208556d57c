// The resolved config as JSON (to_json in src/core/config.h): what every result record
// carries, spelled as a config file spells it, so a record's config reads back as a config.
#include <cstdlib>

#include "src/core/choices.h"
#include "src/core/config.h"
#include "src/core/config_keys.h"

namespace sb {

nlohmann::json to_json(const TrainConfig& cfg) {
    // fp32 fields go out as the double with the same shortest text, so 1e-3f reads 0.001.
    auto real = [](float v) { return std::strtod(number_text(v).c_str(), nullptr); };
    const OptimizerConfig& opt = cfg.optimizer;
    return nlohmann::json{
        {"source", cfg.source},
        {"model", cfg.model},
        {"mlp",
         {{"input_dim", cfg.mlp.input_dim},
          {"hidden", cfg.mlp.hidden},
          {"num_classes", cfg.mlp.num_classes},
          {"activation", activation_name(cfg.mlp.activation)},
          {"teacher_hidden", cfg.mlp.teacher_hidden}}},
        {"transformer",
         {{"arch", transformer_arch_name(cfg.transformer.shape.arch)},
          {"layers", cfg.transformer.shape.layers},
          {"hidden", cfg.transformer.shape.hidden},
          {"heads", cfg.transformer.shape.heads},
          {"ffn", cfg.transformer.shape.ffn},
          {"vocab", cfg.transformer.shape.vocab},
          {"seq_len", cfg.transformer.shape.seq_len},
          {"max_positions", cfg.transformer.shape.max_positions},
          {"type_vocab", cfg.transformer.shape.type_vocab},
          {"dropout", real(cfg.transformer.shape.dropout)},
          {"attention_dropout", real(cfg.transformer.shape.attention_dropout)},
          {"layernorm_eps", real(cfg.transformer.shape.layernorm_eps)},
          {"mask_prob", real(cfg.transformer.mask_prob)}}},
        {"resnet",
         {{"blocks", cfg.resnet.blocks},
          {"width", cfg.resnet.width},
          {"image_size", cfg.resnet.image_size},
          {"num_classes", cfg.resnet.num_classes},
          {"bn_eps", real(cfg.resnet.bn_eps)}}},
        {"batch_size", cfg.batch_size},
        {"scaling_mode", scaling_mode_name(cfg.scaling_mode)},
        {"scaling", cfg.scaling},
        {"steps", cfg.steps},
        {"warmup", cfg.warmup},
        {"dataset_batches", cfg.dataset_batches},
        {"precision", precision_name(cfg.precision)},
        {"optimizer",
         {{"kind", optimizer_kind_name(opt.kind)},
          {"lr", real(opt.lr)},
          {"momentum", real(opt.momentum)},
          {"weight_decay", real(opt.weight_decay)},
          {"beta1", real(opt.beta1)},
          {"beta2", real(opt.beta2)},
          {"eps", real(opt.eps)}}},
        {"bucket_mb", cfg.bucket_mb},
        {"grad_dtype", grad_dtype_name(cfg.grad_dtype)},
        {"sharding", sharding_mode_name(cfg.sharding)},
        {"seed", cfg.seed},
        {"backend", backend_choice_name(cfg.backend)},
        {"share_gpu", cfg.share_gpu},
        {"out", cfg.out},
        {"cuda_graphs", cfg.cuda_graphs},
        {"conv_engine", conv_engine_choice_name(cfg.conv_engine)},
        {"sdc_check_every", cfg.sdc_check_every},
    };
}

}  // namespace sb
