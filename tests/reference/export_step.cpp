// scalebench_export_step: one forward+backward of a config's transformer or ResNet, written
// out for tests/reference/torch_transformer_check.py to replay in PyTorch (Hugging Face
// transformers; torchvision's ResNet written out). Writes into --dir: params.bin (fp32
// initial parameters, flat), params.json (model shape and each parameter's name, offset,
// rows, cols and whether it is HF's tensor transposed; a ResNet convolution's is [out, ky,
// kx, in], torch's [out, in, ky, kx]), the batch
// (transformer: ids.bin / labels.bin, int32 batch x seq_len, label -1 = not predicted;
// resnet: images.bin, fp32 NHWC, and labels.bin, int32 per image) and step.json (backend,
// precision, loss, each parameter's gradient L2 norm).
// Dropout is forced to 0 so both sides compute the same function. --perturb A adds
// uniform(-A, A) noise to every initial parameter, so the loss depends on all of them.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "models/image_data.h"
#include "models/resnet.h"
#include "models/rng.h"
#include "models/transformer.h"
#include "src/system/backend.h"
#include "src/core/config.h"
#include "base/errors.h"
#include "src/core/workload.h"

namespace {

void write_binary(const std::filesystem::path& path, const void* data, size_t bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    if (!out) throw sb::UserError("cannot write " + path.string());
}

void write_json(const std::filesystem::path& path, const nlohmann::json& j) {
    std::ofstream out(path);
    out << j.dump(1) << "\n";
    if (!out) throw sb::UserError("cannot write " + path.string());
}

int export_step(const std::string& config_path, const std::string& backend, const std::string& precision,
                int batch, double perturb, const std::filesystem::path& dir) {
    using namespace sb;
    TrainConfig cfg = load_config_file(config_path);
    if (!backend.empty()) cfg.backend = parse_backend_choice(backend);
    if (!precision.empty()) cfg.precision = parse_precision(precision);
    cfg.transformer.shape.dropout = cfg.transformer.shape.attention_dropout = 0.0f;
    cfg.batch_size = batch;
    validate_config(cfg);
    if (cfg.model == "mlp") throw UserError(config_path + ": key 'model': the exporter needs a transformer or a resnet");
    std::unique_ptr<Ops> ops = create_ops(cfg.backend, cfg.precision, MPI_COMM_WORLD);
    std::unique_ptr<Model> model = create_model(cfg, *ops);
    const size_t n = model->num_params();
    const DType dtype = compute_dtype(ops->precision());

    std::vector<float> host(n);
    model->init_params(host.data(), cfg.seed);
    // At init (weights N(0, 0.02)) the logits are nearly uniform and the loss hardly depends on
    // LayerNorm, GELU's variant or the biases; uniform noise on every parameter makes it depend on all.
    if (perturb > 0) {
        PortableRng rng(mix_seed(cfg.seed, 0x9E27));
        for (float& v : host) v += static_cast<float>(perturb * rng.uniform(-1.0, 1.0));
    }
    DeviceBuffer params(*ops, n * sizeof(float)), grads(*ops, n * sizeof(float)), loss(*ops, sizeof(float));
    DeviceBuffer weights;
    ops->upload(params.get(), host.data(), n * sizeof(float));
    if (dtype != DType::f32) {
        weights = DeviceBuffer(*ops, n * dtype_size(dtype));
        ops->cast(params.tensor(DType::f32, 1, static_cast<int64_t>(n)), weights.tensor(dtype, 1, static_cast<int64_t>(n)));
    }
    model->bind(FlatBuffers{params.as<float>(), weights.get() ? weights.get() : params.get(), grads.as<float>()}, batch);
    std::unique_ptr<Dataset> data = create_dataset(cfg, *ops, batch, 0, batch);
    const Tensor inputs = data->inputs(0);
    model->forward_backward(inputs, data->labels(0), loss.as<float>(), 1.0f, nullptr);

    float host_loss = 0;
    std::vector<float> host_grads(n);
    ops->download(&host_loss, loss.get(), sizeof(float));
    ops->download(host_grads.data(), grads.get(), n * sizeof(float));
    std::filesystem::create_directories(dir);
    write_binary(dir / "params.bin", host.data(), n * sizeof(float));
    nlohmann::json shape, plist = nlohmann::json::array(), norms = nlohmann::json::object();
    if (cfg.model == "resnet") {
        // The images as fp32 from the generator the dataset uploads from (the backend's copy
        // is in the compute dtype), labels as the dataset's.
        const ResNetShape& r = cfg.resnet;
        std::vector<float> images(static_cast<size_t>(inputs.numel()));
        std::vector<int32_t> labels(static_cast<size_t>(batch));
        make_image_shard(ImageTask{r.image_size, r.num_classes, cfg.seed}, 0, 0, batch, images.data(), labels.data());
        write_binary(dir / "images.bin", images.data(), images.size() * sizeof(float));
        write_binary(dir / "labels.bin", labels.data(), labels.size() * sizeof(int32_t));
        shape = {{"arch", "resnet"}, {"blocks", r.blocks}, {"width", r.width}, {"image_size", r.image_size},
                 {"num_classes", r.num_classes}, {"bn_eps", r.bn_eps}};
    } else {
        const size_t tokens = static_cast<size_t>(inputs.numel());
        std::vector<int32_t> ids(tokens), labels(tokens);
        ops->download(ids.data(), inputs.data, tokens * sizeof(int32_t));
        ops->download(labels.data(), data->labels(0), tokens * sizeof(int32_t));
        write_binary(dir / "ids.bin", ids.data(), tokens * sizeof(int32_t));
        write_binary(dir / "labels.bin", labels.data(), tokens * sizeof(int32_t));
        const TransformerShape& s = cfg.transformer.shape;
        shape = {{"arch", transformer_arch_name(s.arch)}, {"layers", s.layers}, {"hidden", s.hidden},
                 {"heads", s.heads}, {"ffn", s.ffn}, {"vocab", s.vocab}, {"seq_len", s.seq_len},
                 {"max_positions", s.max_positions}, {"type_vocab", s.type_vocab},
                 {"layernorm_eps", s.layernorm_eps}};
    }
    ops->synchronize();
    for (const ParamInfo& p : model->params()) {
        plist.push_back({{"name", p.name}, {"offset", p.offset}, {"rows", p.rows}, {"cols", p.cols},
                         {"hf_transposed", cfg.model == "transformer" &&
                                               Transformer::stored_transposed_from_hf(cfg.transformer.shape, p)}});
        double sum = 0;
        for (size_t i = 0; i < p.count(); ++i) sum += static_cast<double>(host_grads[p.offset + i]) * host_grads[p.offset + i];
        norms[p.name] = std::sqrt(sum);
    }
    write_json(dir / "params.json", {{"model", shape}, {"num_params", n}, {"params", plist}});
    write_json(dir / "step.json",
               {{"config", config_path}, {"backend", ops->name()}, {"precision", precision_name(ops->precision())},
                {"batch", batch}, {"seq_len", cfg.model == "transformer" ? cfg.transformer.shape.seq_len : 1},
                {"seed", cfg.seed}, {"perturb", perturb}, {"loss", host_loss}, {"grad_norms", norms}});
    std::cout << "exported " << config_path << " (" << n << " parameters, " << ops->name() << " "
              << precision_name(ops->precision()) << ", batch " << batch << "): loss " << host_loss << " -> "
              << dir.string() << "\n";
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    CLI::App app{"one forward+backward of a transformer or resnet config, exported for the PyTorch reference check"};
    std::string config, backend, precision, dir;
    int batch = 4;
    double perturb = 0;
    app.add_option("-c,--config", config, "transformer or resnet workload YAML")->required();
    app.add_option("--backend", backend, "cpu or cuda (default: the config's)");
    app.add_option("--precision", precision, "fp32, tf32, bf16 or fp16 (default: the config's)");
    app.add_option("--batch", batch, "samples in the batch")->check(CLI::Range(1, 1 << 16));
    app.add_option("--perturb", perturb, "add uniform(-A, A) noise to every initial parameter")->check(CLI::Range(0.0, 10.0));
    app.add_option("--dir", dir, "output folder")->required();
    int code = 0;
    try {
        app.parse(argc, argv);
        code = export_step(config, backend, precision, batch, perturb, dir);
    } catch (const CLI::ParseError& e) {
        code = app.exit(e);
    } catch (const sb::UserError& e) {
        std::cerr << "scalebench_export_step: " << e.what() << "\n";
        code = 2;
    } catch (const std::exception& e) {
        std::cerr << "scalebench_export_step: " << e.what() << "\n";
        code = 1;
    }
    MPI_Finalize();
    return code;
}
