// Config loading and validation (src/core/config_yaml.cpp, config_checks.cpp): every YAML rule reports the exact
// "FILE:LINE:COL: key 'x': reason" line, flags are re-checked without a line, world-size
// rules, and the preset files in configs/ parse (default.yaml to exactly the built-in default).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "src/core/config.h"
#include "base/errors.h"

namespace sb {
namespace {

// The UserError line that parsing `yaml` gives, or a marker when it parses.
std::string parse_error(const std::string& yaml) {
    try {
        parse_config(yaml, "t.yaml");
    } catch (const UserError& e) {
        return e.what();
    }
    return "<parsed without error>";
}

std::string validate_error(const TrainConfig& cfg) {
    try {
        validate_config(cfg);
    } catch (const UserError& e) {
        return e.what();
    }
    return "<valid>";
}

std::string world_error(const TrainConfig& cfg, int world_size) {
    try {
        validate_for_world(cfg, world_size);
    } catch (const UserError& e) {
        return e.what();
    }
    return "<valid>";
}

std::string preset_path(const std::string& name) { return std::string(SCALEBENCH_SOURCE_DIR) + "/configs/" + name; }

// ---------------------------------------------------------------- values that parse

// A config file must hold a map of keys: an empty one (or one yaml-cpp reads as empty, such
// as a lone ",") is refused, as no --config is how the built-in default is run.
TEST(ConfigParse, EmptyDocumentIsRefused) {
    for (const char* text : {"", "\n\n", "# only a comment\n", "---\n", ","}) {
        EXPECT_EQ(parse_error(text), "t.yaml:1:1: the config holds no keys: a config is a YAML map of keys (no --config "
                                     "runs the built-in default)")
            << "for text '" << text << "'";
    }
}

TEST(ConfigParse, ReadsEveryKey) {
    TrainConfig cfg = parse_config(
        "model: mlp\n"
        "mlp:\n"
        "  input_dim: 64\n"
        "  hidden: [128, 96]\n"
        "  num_classes: 10\n"
        "  activation: gelu\n"
        "  teacher_hidden: 8\n"
        "batch_size: 48\n"
        "scaling_mode: strong\n"
        "scaling: [1, 2, 3]\n"
        "steps: 7\n"
        "warmup: 0\n"
        "dataset_batches: 2\n"
        "precision: bf16\n"
        "optimizer:\n"
        "  kind: sgd\n"
        "  lr: 1e-2\n"
        "  momentum: 0\n"
        "  weight_decay: 5.0e-4\n"
        "  beta1: 0.5\n"
        "  beta2: .75\n"
        "  eps: 1e-6\n"
        "bucket_mb: 0.5\n"
        "seed: 18446744073709551615\n"
        "backend: cpu\n"
        "out: \"r/x.jsonl\"\n",
        "all.yaml");
    EXPECT_EQ(cfg.source, "all.yaml");
    EXPECT_EQ(cfg.model, "mlp");
    EXPECT_EQ(cfg.mlp.input_dim, 64);
    EXPECT_EQ(cfg.mlp.hidden, (std::vector<int>{128, 96}));
    EXPECT_EQ(cfg.mlp.num_classes, 10);
    EXPECT_EQ(cfg.mlp.activation, Activation::gelu);
    EXPECT_EQ(cfg.mlp.teacher_hidden, 8);
    EXPECT_EQ(cfg.batch_size, 48);
    EXPECT_EQ(cfg.scaling_mode, ScalingMode::strong);
    EXPECT_EQ(cfg.scaling, (std::vector<int>{1, 2, 3}));
    EXPECT_EQ(cfg.steps, 7);
    EXPECT_EQ(cfg.warmup, 0);
    EXPECT_EQ(cfg.dataset_batches, 2);
    EXPECT_EQ(cfg.precision, Precision::bf16);
    EXPECT_EQ(cfg.optimizer.kind, OptimizerConfig::Kind::sgd);
    EXPECT_FLOAT_EQ(cfg.optimizer.lr, 0.01f);
    EXPECT_FLOAT_EQ(cfg.optimizer.momentum, 0.0f);
    EXPECT_FLOAT_EQ(cfg.optimizer.weight_decay, 5e-4f);
    EXPECT_FLOAT_EQ(cfg.optimizer.beta1, 0.5f);
    EXPECT_FLOAT_EQ(cfg.optimizer.beta2, 0.75f);
    EXPECT_FLOAT_EQ(cfg.optimizer.eps, 1e-6f);
    EXPECT_DOUBLE_EQ(cfg.bucket_mb, 0.5);
    EXPECT_EQ(cfg.seed, 18446744073709551615ull);
    EXPECT_EQ(cfg.backend, BackendChoice::cpu);
    EXPECT_EQ(cfg.out, "r/x.jsonl");
    EXPECT_EQ(validate_error(cfg), "<valid>");
}

TEST(ConfigParse, UnsetKeysKeepTheirDefaults) {
    TrainConfig cfg = parse_config("steps: 5\noptimizer:\n  lr: 0.5\n", "t.yaml");
    TrainConfig def;
    EXPECT_EQ(cfg.steps, 5);
    EXPECT_FLOAT_EQ(cfg.optimizer.lr, 0.5f);
    EXPECT_EQ(cfg.optimizer.kind, def.optimizer.kind);
    EXPECT_FLOAT_EQ(cfg.optimizer.beta2, def.optimizer.beta2);
    EXPECT_EQ(cfg.mlp.hidden, def.mlp.hidden);
    EXPECT_EQ(cfg.batch_size, def.batch_size);
}

TEST(ConfigParse, NumbersIntegersAndSigns) {
    EXPECT_EQ(parse_config("warmup: +4\n", "t").warmup, 4);
    EXPECT_EQ(parse_config("seed: 0\n", "t").seed, 0u);
    EXPECT_DOUBLE_EQ(parse_config("bucket_mb: 4096\n", "t").bucket_mb, 4096.0);  // integer text is a number too
    EXPECT_DOUBLE_EQ(parse_config("bucket_mb: 1E1\n", "t").bucket_mb, 10.0);
    EXPECT_EQ(parse_config("mlp: {input_dim: 1048576}\n", "t").mlp.input_dim, 1 << 20);
    EXPECT_EQ(parse_config("batch_size: 16777216\n", "t").batch_size, 1 << 24);
    EXPECT_EQ(parse_config("steps: 1000000000\n", "t").steps, 1000000000);
}

// ---------------------------------------------------------------- unknown and repeated keys

TEST(ConfigKeys, UnknownTopLevelKeySuggestsTheClosest) {
    EXPECT_EQ(parse_error("steps: 3\n"
                          "bucket_mbb: 4\n"),
              "t.yaml:2:1: key 'bucket_mbb': unknown key; did you mean 'bucket_mb'?");
    EXPECT_EQ(parse_error("stpes: 3\n"), "t.yaml:1:1: key 'stpes': unknown key; did you mean 'steps'?");
    EXPECT_EQ(parse_error("Seed: 3\n"), "t.yaml:1:1: key 'Seed': unknown key; did you mean 'seed'?");
}

TEST(ConfigKeys, UnknownNestedKeySuggestsTheFullPath) {
    EXPECT_EQ(parse_error("mlp:\n"
                          "  input_dim: 8\n"
                          "  hiden: [4]\n"),
              "t.yaml:3:3: key 'mlp.hiden': unknown key; did you mean 'mlp.hidden'?");
    EXPECT_EQ(parse_error("optimizer: {kind: sgd, momentun: 0.5}\n"),
              "t.yaml:1:24: key 'optimizer.momentun': unknown key; did you mean 'optimizer.momentum'?");
}

TEST(ConfigKeys, KeyInTheWrongSectionNamesTheRightOne) {
    EXPECT_EQ(parse_error("steps: 3\n"
                          "lr: 0.1\n"),
              "t.yaml:2:1: key 'lr': unknown key here; did you mean 'optimizer.lr'?");
    EXPECT_EQ(parse_error("mlp:\n"
                          "  batch_size: 4\n"),
              "t.yaml:2:3: key 'mlp.batch_size': unknown key here; did you mean the top-level key 'batch_size'?");
}

TEST(ConfigKeys, FarFromEveryKeyListsTheValidOnes) {
    EXPECT_EQ(parse_error("\n"
                          "    colour: blue\n"),
              "t.yaml:2:5: key 'colour': unknown key; valid keys: model, mlp, transformer, resnet, batch_size, scaling_mode, scaling, "
              "steps, warmup, dataset_batches, precision, optimizer, bucket_mb, grad_dtype, sharding, seed, backend, share_gpu, out, "
              "cuda_graphs, conv_engine, sdc_check_every");
    EXPECT_EQ(parse_error("optimizer:\n"
                          "  nesterov: true\n"),
              "t.yaml:2:3: key 'optimizer.nesterov': unknown key; valid keys in 'optimizer': kind, lr, momentum, "
              "weight_decay, beta1, beta2, eps");
}

TEST(ConfigKeys, RepeatedKeyIsAnError) {
    EXPECT_EQ(parse_error("steps: 3\n"
                          "warmup: 1\n"
                          "steps: 4\n"),
              "t.yaml:3:1: key 'steps': given twice (first at line 1)");
}

TEST(ConfigKeys, TopLevelMustBeAMap) {
    EXPECT_EQ(parse_error("- steps: 3\n"), "t.yaml:1:1: the config must be a map of keys, got a list");
    EXPECT_EQ(parse_error("just words\n"), "t.yaml:1:1: the config must be a map of keys, got a scalar");
    EXPECT_EQ(parse_error("[a, b]: 1\n"), "t.yaml:1:1: keys must be names, got a list");
}

// ---------------------------------------------------------------- wrong types

TEST(ConfigTypes, IntegerFieldsRejectEverythingButIntegers) {
    EXPECT_EQ(parse_error("steps: 1.5\n"), "t.yaml:1:8: key 'steps': expected an integer, got '1.5'");
    EXPECT_EQ(parse_error("steps: 1e3\n"), "t.yaml:1:8: key 'steps': expected an integer, got '1e3'");
    EXPECT_EQ(parse_error("steps: 12abc\n"), "t.yaml:1:8: key 'steps': expected an integer, got '12abc'");
    EXPECT_EQ(parse_error("steps: true\n"), "t.yaml:1:8: key 'steps': expected an integer, got 'true'");
    EXPECT_EQ(parse_error("steps: 0x10\n"), "t.yaml:1:8: key 'steps': expected an integer, got '0x10'");
    EXPECT_EQ(parse_error("steps: \"12\"\n"), "t.yaml:1:8: key 'steps': expected an integer, got the string \"12\"");
    EXPECT_EQ(parse_error("steps: [12]\n"), "t.yaml:1:8: key 'steps': expected an integer, got a list");
    EXPECT_EQ(parse_error("steps: {n: 12}\n"), "t.yaml:1:8: key 'steps': expected an integer, got a map");
}

TEST(ConfigTypes, MissingValueIsReportedAtItsKey) {
    EXPECT_EQ(parse_error("warmup: 1\n"
                          "steps:\n"
                          "seed: 3\n"),
              "t.yaml:2:1: key 'steps': expected an integer, got no value");
    EXPECT_EQ(parse_error("mlp:\n"
                          "  num_classes: ~\n"),
              "t.yaml:2:3: key 'mlp.num_classes': expected an integer, got no value");
}

TEST(ConfigTypes, RealFieldsAcceptIntegersAndExponents) {
    EXPECT_FLOAT_EQ(parse_config("optimizer: {lr: 1e-3}\n", "t").optimizer.lr, 1e-3f);
    EXPECT_FLOAT_EQ(parse_config("optimizer: {lr: 2}\n", "t").optimizer.lr, 2.0f);
    EXPECT_EQ(parse_error("bucket_mb: abc\n"), "t.yaml:1:12: key 'bucket_mb': expected a number, got 'abc'");
    EXPECT_EQ(parse_error("bucket_mb: .inf\n"), "t.yaml:1:12: key 'bucket_mb': expected a number, got '.inf'");
    EXPECT_EQ(parse_error("bucket_mb: .nan\n"), "t.yaml:1:12: key 'bucket_mb': expected a number, got '.nan'");
    EXPECT_EQ(parse_error("bucket_mb: false\n"), "t.yaml:1:12: key 'bucket_mb': expected a number, got 'false'");
    EXPECT_EQ(parse_error("bucket_mb: '25'\n"), "t.yaml:1:12: key 'bucket_mb': expected a number, got the string \"25\"");
    EXPECT_EQ(parse_error("optimizer:\n"
                          "  kind: adamw\n"
                          "  eps: 1e-8x\n"),
              "t.yaml:3:8: key 'optimizer.eps': expected a number, got '1e-8x'");
}

TEST(ConfigTypes, RealsMustFitTheirStorage) {
    EXPECT_EQ(parse_error("bucket_mb: 1e400\n"), "t.yaml:1:12: key 'bucket_mb': 1e400 is too large to be a number");
    EXPECT_EQ(parse_error("optimizer: {lr: 1e39}\n"), "t.yaml:1:17: key 'optimizer.lr': 1e39 does not fit a 32-bit float");
    EXPECT_EQ(parse_error("optimizer: {eps: 1e-50}\n"),
              "t.yaml:1:18: key 'optimizer.eps': 1e-50 does not fit a 32-bit float");
}

TEST(ConfigTypes, ListsAndMapsWhereTheyBelong) {
    EXPECT_EQ(parse_error("mlp:\n"
                          "  hidden: {a: 1}\n"),
              "t.yaml:2:11: key 'mlp.hidden': expected a list of integers, got a map");
    EXPECT_EQ(parse_error("mlp:\n"
                          "  hidden: 512\n"),
              "t.yaml:2:11: key 'mlp.hidden': expected a list of integers, got a scalar");
    EXPECT_EQ(parse_error("mlp: [1, 2]\n"), "t.yaml:1:6: key 'mlp': expected a map, got a list");
    EXPECT_EQ(parse_error("optimizer: adamw\n"), "t.yaml:1:12: key 'optimizer': expected a map, got a scalar");
    EXPECT_EQ(parse_error("mlp:\n"
                          "steps: 3\n"),
              "t.yaml:1:1: key 'mlp': expected a map, got no value");
    EXPECT_EQ(parse_error("out: [a]\n"), "t.yaml:1:6: key 'out': expected a string, got a list");
    EXPECT_EQ(parse_error("precision: {a: 1}\n"),
              "t.yaml:1:12: key 'precision': expected one of fp32, tf32, bf16, fp16, got a map");
}

TEST(ConfigTypes, ListEntriesAreCheckedOneByOne) {
    EXPECT_EQ(parse_error("mlp:\n"
                          "  hidden: [512, 256, 1.5]\n"),
              "t.yaml:2:22: key 'mlp.hidden[2]': expected an integer, got '1.5'");
    EXPECT_EQ(parse_error("mlp:\n"
                          "  hidden:\n"
                          "    - 512\n"
                          "    - [4]\n"),
              "t.yaml:4:7: key 'mlp.hidden[1]': expected an integer, got a list");
    EXPECT_EQ(parse_error("scaling: [1, two]\n"), "t.yaml:1:14: key 'scaling[1]': expected an integer, got 'two'");
}

// ---------------------------------------------------------------- ranges

TEST(ConfigRanges, IntegerBounds) {
    EXPECT_EQ(parse_error("batch_size: 0\n"), "t.yaml:1:13: key 'batch_size': must be >= 1, got 0 (2^24 rows per rank keeps a global batch over 2^20 ranks inside 2^44)");
    EXPECT_EQ(parse_error("batch_size: 16777217\n"), "t.yaml:1:13: key 'batch_size': must be <= 16777216, got 16777217 (2^24 rows per rank keeps a global batch over 2^20 ranks inside 2^44)");
    EXPECT_EQ(parse_error("steps: 0\n"), "t.yaml:1:8: key 'steps': must be >= 1, got 0 (steps plus warmup must fit a 32-bit int)");
    EXPECT_EQ(parse_error("steps: 1000000001\n"), "t.yaml:1:8: key 'steps': must be <= 1000000000, got 1000000001 (steps plus warmup must fit a 32-bit int)");
    EXPECT_EQ(parse_error("warmup: -1\n"), "t.yaml:1:9: key 'warmup': must be >= 0, got -1 (steps plus warmup must fit a 32-bit int)");
    EXPECT_EQ(parse_error("dataset_batches: 0\n"), "t.yaml:1:18: key 'dataset_batches': must be >= 1, got 0 (distinct batches are held in host memory; 2^20 is past any useful cycle)");
    EXPECT_EQ(parse_error("mlp: {input_dim: 1048577}\n"),
              "t.yaml:1:18: key 'mlp.input_dim': must be <= 1048576, got 1048577 (a layer of 2^20 units is past any model measured; products of widths stay in 64 bits)");
    EXPECT_EQ(parse_error("mlp: {num_classes: 1}\n"), "t.yaml:1:20: key 'mlp.num_classes': must be >= 2, got 1 (a classifier needs two classes; the width bound holds above)");
    EXPECT_EQ(parse_error("mlp: {teacher_hidden: 0}\n"),
              "t.yaml:1:23: key 'mlp.teacher_hidden': must be >= 1, got 0 (a layer of 2^20 units is past any model measured; products of widths stay in 64 bits)");
    EXPECT_EQ(parse_error("mlp:\n"
                          "  hidden: [512, 0]\n"),
              "t.yaml:2:17: key 'mlp.hidden[1]': must be >= 1, got 0 (a layer of 2^20 units is past any model measured; products of widths stay in 64 bits)");
}

TEST(ConfigRanges, IntegersBeyond64Bits) {
    EXPECT_EQ(parse_error("steps: 99999999999999999999\n"),
              "t.yaml:1:8: key 'steps': must be <= 1000000000, got 99999999999999999999 (steps plus warmup must fit a 32-bit int)");
    EXPECT_EQ(parse_error("warmup: -99999999999999999999\n"),
              "t.yaml:1:9: key 'warmup': must be >= 0, got -99999999999999999999 (steps plus warmup must fit a 32-bit int)");
    EXPECT_EQ(parse_error("seed: -1\n"), "t.yaml:1:7: key 'seed': must be >= 0, got -1");
    EXPECT_EQ(parse_error("seed: 18446744073709551616\n"),
              "t.yaml:1:7: key 'seed': must be <= 18446744073709551615, got 18446744073709551616");
}

TEST(ConfigRanges, RealBounds) {
    EXPECT_EQ(parse_error("bucket_mb: 0\n"), "t.yaml:1:12: key 'bucket_mb': must be in (0, 4096], got 0 (4 GiB buckets are past any GPU's all-reduce buffer)");
    EXPECT_EQ(parse_error("bucket_mb: 4096.5\n"), "t.yaml:1:12: key 'bucket_mb': must be in (0, 4096], got 4096.5 (4 GiB buckets are past any GPU's all-reduce buffer)");
    EXPECT_EQ(parse_error("optimizer:\n"
                          "  lr: -0.1\n"),
              "t.yaml:2:7: key 'optimizer.lr': must be > 0, got -0.1 (a rate, scale or epsilon: zero would do nothing)");
    EXPECT_EQ(parse_error("optimizer: {momentum: 1.0}\n"),
              "t.yaml:1:23: key 'optimizer.momentum': must be in [0, 1), got 1.0 (a probability or moment decay: 1 would never update)");
    EXPECT_EQ(parse_error("optimizer: {weight_decay: -1e-4}\n"),
              "t.yaml:1:27: key 'optimizer.weight_decay': must be >= 0, got -1e-4 (a decay: negative would grow the weights)");
    EXPECT_EQ(parse_error("optimizer: {beta1: -0.5}\n"), "t.yaml:1:20: key 'optimizer.beta1': must be in [0, 1), got -0.5 (a probability or moment decay: 1 would never update)");
    EXPECT_EQ(parse_error("optimizer: {beta2: 1}\n"), "t.yaml:1:20: key 'optimizer.beta2': must be in [0, 1), got 1 (a probability or moment decay: 1 would never update)");
    EXPECT_EQ(parse_error("optimizer: {eps: 0}\n"), "t.yaml:1:18: key 'optimizer.eps': must be > 0, got 0 (a rate, scale or epsilon: zero would do nothing)");
}

TEST(ConfigRanges, ScalingListIsNonEmptyStrictlyIncreasing) {
    EXPECT_EQ(parse_error("scaling: []\n"), "t.yaml:1:10: key 'scaling': must be a non-empty list");
    EXPECT_EQ(parse_error("scaling: [0, 1]\n"), "t.yaml:1:11: key 'scaling[0]': must be >= 1, got 0 (2^20 ranks is past any cluster; products with the batch stay in 64 bits)");
    EXPECT_EQ(parse_error("scaling:\n"
                          "  - 1\n"
                          "  - 2\n"
                          "  - 2\n"),
              "t.yaml:2:3: key 'scaling': 2 is given twice (entries 2 and 3)");
    EXPECT_EQ(parse_error("scaling: [1, 4, 2]\n"),
              "t.yaml:1:17: key 'scaling[2]': world sizes must be strictly increasing, got 2 after 4");
    EXPECT_EQ(parse_error("mlp: {hidden: []}\n"), "t.yaml:1:15: key 'mlp.hidden': must be a non-empty list");
}

TEST(ConfigRanges, StringsMustNotBeEmpty) {
    EXPECT_EQ(parse_error("out: ''\n"), "t.yaml:1:6: key 'out': must be a non-empty string");
    EXPECT_EQ(parse_error("out:\n"), "t.yaml:1:1: key 'out': expected a string, got no value");
}

// ---------------------------------------------------------------- enums

TEST(ConfigEnums, BadSpellingsListTheValidOnes) {
    EXPECT_EQ(parse_error("precision: fp64\n"),
              "t.yaml:1:12: key 'precision': unknown value 'fp64'; valid values: fp32, tf32, bf16, fp16");
    EXPECT_EQ(parse_error("precision: fp61\n"),
              "t.yaml:1:12: key 'precision': unknown value 'fp61'; valid values: fp32, tf32, bf16, fp16; "
              "did you mean 'fp16'?");
    EXPECT_EQ(parse_error("precision: float16\n"),
              "t.yaml:1:12: key 'precision': unknown value 'float16'; valid values: fp32, tf32, bf16, fp16");
    EXPECT_EQ(parse_error("scaling_mode: both\n"),
              "t.yaml:1:15: key 'scaling_mode': unknown value 'both'; valid values: weak, strong");
    EXPECT_EQ(parse_error("backend: gpu\n"),
              "t.yaml:1:10: key 'backend': unknown value 'gpu'; valid values: auto, cpu, cuda; did you mean 'cpu'?");
    EXPECT_EQ(parse_error("model: cnn\n"),
              "t.yaml:1:8: key 'model': unknown value 'cnn'; valid values: mlp, transformer, resnet");
    EXPECT_EQ(parse_error("mlp:\n"
                          "  activation: swish\n"),
              "t.yaml:2:15: key 'mlp.activation': unknown value 'swish'; valid values: relu, gelu, tanh, none");
    EXPECT_EQ(parse_error("optimizer:\n"
                          "  kind: adam\n"),
              "t.yaml:2:9: key 'optimizer.kind': unknown value 'adam'; valid values: sgd, adamw; did you mean 'adamw'?");
}

TEST(ConfigEnums, EveryValidSpellingParses) {
    EXPECT_EQ(parse_config("precision: fp32", "t").precision, Precision::fp32);
    EXPECT_EQ(parse_config("precision: tf32", "t").precision, Precision::tf32);
    EXPECT_EQ(parse_config("precision: bf16", "t").precision, Precision::bf16);
    EXPECT_EQ(parse_config("precision: 'fp16'", "t").precision, Precision::fp16);
    EXPECT_EQ(parse_config("mlp: {activation: relu}", "t").mlp.activation, Activation::relu);
    EXPECT_EQ(parse_config("mlp: {activation: gelu}", "t").mlp.activation, Activation::gelu);
    EXPECT_EQ(parse_config("mlp: {activation: tanh}", "t").mlp.activation, Activation::tanh);
    EXPECT_EQ(parse_config("mlp: {activation: none}", "t").mlp.activation, Activation::none);
    EXPECT_EQ(parse_config("backend: auto", "t").backend, BackendChoice::auto_select);
    EXPECT_EQ(parse_config("backend: cuda", "t").backend, BackendChoice::cuda);
    EXPECT_EQ(parse_config("scaling_mode: weak", "t").scaling_mode, ScalingMode::weak);
    EXPECT_EQ(parse_config("optimizer: {kind: adamw}", "t").optimizer.kind, OptimizerConfig::Kind::adamw);
}

TEST(ConfigEnums, FlagParsersShareTheSpellings) {
    EXPECT_EQ(parse_precision("bf16"), Precision::bf16);
    EXPECT_EQ(parse_precision("tf32"), Precision::tf32);
    EXPECT_EQ(parse_backend_choice("auto"), BackendChoice::auto_select);
    EXPECT_EQ(parse_backend_choice("cpu"), BackendChoice::cpu);
    try {
        parse_precision("int8");
        FAIL() << "int8 parsed";
    } catch (const UserError& e) {
        EXPECT_STREQ(e.what(), "precision: unknown value 'int8'; valid values: fp32, tf32, bf16, fp16");
    }
    try {
        parse_backend_choice("cudaa");
        FAIL() << "cudaa parsed";
    } catch (const UserError& e) {
        EXPECT_STREQ(e.what(), "backend: unknown value 'cudaa'; valid values: auto, cpu, cuda; did you mean 'cuda'?");
    }
    EXPECT_STREQ(backend_choice_name(BackendChoice::auto_select), "auto");
    EXPECT_STREQ(backend_choice_name(BackendChoice::cuda), "cuda");
    EXPECT_STREQ(scaling_mode_name(ScalingMode::strong), "strong");
}

// ---------------------------------------------------------------- YAML syntax and documents

TEST(ConfigSyntax, ErrorsCarryTheParsersLineAndColumn) {
    EXPECT_EQ(parse_error("steps: 3\n"
                          "mlp: {hidden: [1, 2}\n"),
              "t.yaml:2:20: YAML syntax error: illegal flow end");
    EXPECT_EQ(parse_error("a: b: c\n"), "t.yaml:1:5: YAML syntax error: illegal map value");
    EXPECT_EQ(parse_error("steps: 3\n"
                          "  warmup: 1\n"),
              "t.yaml:2:9: YAML syntax error: illegal map value");
}

TEST(ConfigSyntax, OnlyOneDocument) {
    EXPECT_EQ(parse_error("steps: 3\n"
                          "---\n"
                          "steps: 4\n"),
              "t.yaml:2:1: the config must be one YAML document; a second one starts here");
    // A leading marker and an end marker are one document.
    EXPECT_EQ(parse_config("---\nsteps: 3\n...\n", "t.yaml").steps, 3);
}

// Found by tests/fuzz: yaml-cpp's LoadAll loops forever on a lone ",", and a non-UTF-8
// string was accepted, only to fail when its record was written after the whole run.
TEST(ConfigSyntax, FuzzerFindingsAreClearErrors) {
    // "," returns at once: yaml-cpp reads it as an empty document, which is refused.
    EXPECT_NE(parse_error(",").find("the config holds no keys"), std::string::npos);
    EXPECT_EQ(parse_error("steps: 3\nout: \"r\xff.jsonl\"\n"), "t.yaml:2:8: the config is not valid UTF-8");
    EXPECT_EQ(parse_config("out: \"r\xc3\xa9sultats.jsonl\"\n", "t.yaml").out, "r\xc3\xa9sultats.jsonl");
    // --out sets the path without the YAML text's check: the value is checked again.
    TrainConfig cfg;
    cfg.out = "r\xff.jsonl";
    try {
        validate_config(cfg, {{"out", "--out"}});
        ADD_FAILURE() << "an --out that is not UTF-8 was accepted";
    } catch (const UserError& e) {
        EXPECT_EQ(std::string(e.what()),
                  "--out: is not UTF-8 text (byte 2 of the path), which records, being JSON, cannot hold");
    }
    EXPECT_EQ(parse_error("steps: 3\nout: \"r\xc0\xaf.jsonl\"\n"), "t.yaml:2:8: the config is not valid UTF-8");  // overlong
}

// A value a flag set is blamed on the flag, an entry of a list too.
TEST(ConfigRanges, AValueFromAFlagNamesTheFlag) {
    TrainConfig cfg;
    const FlagKeys flags = {{"scaling", "--scaling"}};
    for (const auto& [scaling, says] : std::vector<std::pair<std::vector<int>, std::string>>{
             {{0}, "--scaling: must be >= 1, got 0 (2^20 ranks is past any cluster; products with the batch stay in 64 bits)"},
             {{2, 1}, "--scaling: world sizes must be strictly increasing, got 1 after 2"},
             {{1, 1}, "--scaling: 1 is given twice (entries 1 and 2)"}}) {
        cfg.scaling = scaling;
        try {
            validate_config(cfg, flags);
            ADD_FAILURE() << says;
        } catch (const UserError& e) {
            EXPECT_EQ(std::string(e.what()), says);
        }
    }
}

// ---------------------------------------------------------------- files

TEST(ConfigFile, MissingFileNamesThePathAndTheReason) {
    try {
        load_config_file("/nonexistent/dir/x.yaml");
        FAIL() << "a missing file loaded";
    } catch (const UserError& e) {
        EXPECT_STREQ(e.what(), "/nonexistent/dir/x.yaml: cannot read config file: No such file or directory");
    }
}

TEST(ConfigFile, DirectoryIsNotAConfig) {
    try {
        load_config_file(SCALEBENCH_SOURCE_DIR "/configs");
        FAIL() << "a directory loaded";
    } catch (const UserError& e) {
        EXPECT_EQ(std::string(e.what()), std::string(SCALEBENCH_SOURCE_DIR) + "/configs: cannot read config file: Is a directory");
    }
}

TEST(ConfigFile, ErrorsNameTheFileAndSourceIsRecorded) {
    std::string path = ::testing::TempDir() + "scalebench_test_config.yaml";
    {
        std::ofstream f(path);
        f << "# a comment\n"
             "steps: 4\n"
             "mlp:\n"
             "  hidden: [8, -8]\n";
    }
    try {
        load_config_file(path);
        FAIL() << "a bad file loaded";
    } catch (const UserError& e) {
        EXPECT_EQ(std::string(e.what()), path + ":4:15: key 'mlp.hidden[1]': must be >= 1, got -8 (a layer of 2^20 units is past any model measured; products of widths stay in 64 bits)");
    }
    {
        std::ofstream f(path);
        f << "steps: 4\n";
    }
    TrainConfig cfg = load_config_file(path);
    EXPECT_EQ(cfg.source, path);
    EXPECT_EQ(cfg.steps, 4);
    std::remove(path.c_str());
}

// ---------------------------------------------------------------- transformer section

TEST(ConfigTransformer, ReadsEveryKeyAndGptDefaultsWhereLeftOut) {
    TrainConfig cfg = parse_config("model: transformer\n"
                                   "transformer:\n"
                                   "  arch: gpt\n"
                                   "  layers: 3\n"
                                   "  hidden: 48\n"
                                   "  heads: 6\n"
                                   "  ffn: 96\n"
                                   "  vocab: 100\n"
                                   "  seq_len: 20\n"
                                   "  dropout: 0.0\n"
                                   "  attention_dropout: 0.2\n",
                                   "t.yaml");
    const TransformerShape& s = cfg.transformer.shape;
    EXPECT_EQ(cfg.model, "transformer");
    EXPECT_EQ(s.arch, TransformerArch::gpt);
    EXPECT_EQ(s.layers, 3);
    EXPECT_EQ(s.hidden, 48);
    EXPECT_EQ(s.heads, 6);
    EXPECT_EQ(s.ffn, 96);
    EXPECT_EQ(s.vocab, 100);
    EXPECT_EQ(s.seq_len, 20);
    EXPECT_EQ(s.dropout, 0.0f);
    EXPECT_EQ(s.attention_dropout, 0.2f);
    EXPECT_EQ(s.max_positions, 1024);   // GPT-2's n_positions
    EXPECT_EQ(s.layernorm_eps, 1e-5f);  // GPT-2's layer_norm_epsilon
    TrainConfig bert = parse_config("transformer: {arch: bert, max_positions: 64, layernorm_eps: 1.0e-6, "
                                    "type_vocab: 3, mask_prob: 0.2, seq_len: 64}\n", "t.yaml");
    EXPECT_EQ(bert.transformer.shape.max_positions, 64);
    EXPECT_EQ(bert.transformer.shape.layernorm_eps, 1e-6f);
    EXPECT_EQ(bert.transformer.shape.type_vocab, 3);
    EXPECT_EQ(bert.transformer.mask_prob, 0.2f);
    validate_config(cfg);
    validate_config(bert);
}

TEST(ConfigTransformer, BadValuesNameFileLineColumnAndKey) {
    EXPECT_EQ(parse_error("transformer:\n"
                          "  hidden: 100\n"
                          "  heads: 8\n"),
              "t.yaml:3:10: key 'transformer.heads': hidden 100 is not divisible by heads 8");
    EXPECT_EQ(parse_error("transformer:\n"
                          "  heads: 5\n"),
              "t.yaml:2:10: key 'transformer.heads': hidden 768 is not divisible by heads 5");
    EXPECT_EQ(parse_error("transformer:\n"
                          "  seq_len: 600\n"),
              "t.yaml:2:12: key 'transformer.seq_len': seq_len 600 exceeds max_positions 512");
    EXPECT_EQ(parse_error("transformer:\n"
                          "  arch: t5\n"),
              "t.yaml:2:9: key 'transformer.arch': unknown value 't5'; valid values: bert, gpt");
    EXPECT_EQ(parse_error("transformer:\n"
                          "  layers: 0\n"),
              "t.yaml:2:11: key 'transformer.layers': must be >= 1, got 0 (no published transformer has more than 1,024 layers)");
    EXPECT_EQ(parse_error("transformer:\n"
                          "  vocab: 2\n"),
              "t.yaml:2:10: key 'transformer.vocab': must be >= 3, got 2 (bert reserves one id for [MASK]; 4M tokens is past any tokenizer)");
    EXPECT_EQ(parse_error("transformer:\n"
                          "  dropout: 1.0\n"),
              "t.yaml:2:12: key 'transformer.dropout': must be in [0, 1), got 1.0 (a probability or moment decay: 1 would never update)");
    EXPECT_EQ(parse_error("transformer:\n"
                          "  mask_prob: 0\n"),
              "t.yaml:2:14: key 'transformer.mask_prob': must be in (0, 1), got 0 (a share of positions: none or all masked trains nothing)");
    EXPECT_EQ(parse_error("transformer:\n"
                          "  layernorm_eps: -1e-5\n"),
              "t.yaml:2:18: key 'transformer.layernorm_eps': must be > 0, got -1e-5 (a rate, scale or epsilon: zero would do nothing)");
    EXPECT_EQ(parse_error("transformer:\n"
                          "  n_head: 12\n"),
              "t.yaml:2:3: key 'transformer.n_head': unknown key; valid keys in 'transformer': arch, layers, hidden, "
              "heads, ffn, vocab, seq_len, max_positions, type_vocab, dropout, attention_dropout, layernorm_eps, "
              "mask_prob");
    EXPECT_EQ(parse_error("transformer:\n"
                          "  hiden: 12\n"),
              "t.yaml:2:3: key 'transformer.hiden': unknown key; did you mean 'transformer.hidden'?");
    EXPECT_EQ(parse_error("transformer: 12\n"), "t.yaml:1:14: key 'transformer': expected a map, got a scalar");
}

TEST(ConfigTransformer, ValidateRechecksTheSameRulesWithoutALine) {
    TrainConfig cfg;
    cfg.transformer.shape.heads = 7;
    EXPECT_EQ(validate_error(cfg), "<built-in default>: key 'transformer.heads': hidden 768 is not divisible by heads 7");
    cfg = TrainConfig{};
    cfg.transformer.shape.seq_len = 1024;
    EXPECT_EQ(validate_error(cfg), "<built-in default>: key 'transformer.seq_len': seq_len 1024 exceeds max_positions 512");
    cfg = TrainConfig{};
    cfg.transformer.mask_prob = 1.0f;
    EXPECT_EQ(validate_error(cfg), "<built-in default>: key 'transformer.mask_prob': must be in (0, 1), got 1 (a share of positions: none or all masked trains nothing)");
}

// ---------------------------------------------------------------- presets

TEST(ConfigPresets, DefaultYamlIsExactlyTheBuiltInDefault) {
    TrainConfig cfg = load_config_file(preset_path("default.yaml"));
    nlohmann::json got = to_json(cfg);
    nlohmann::json want = to_json(TrainConfig{});
    got.erase("source");
    want.erase("source");
    EXPECT_EQ(got, want) << "configs/default.yaml and TrainConfig's defaults drifted apart:\n"
                         << got.dump(2) << "\n" << want.dump(2);
    // Floats compared exactly, not through their printed text.
    TrainConfig def;
    EXPECT_EQ(cfg.optimizer.lr, def.optimizer.lr);
    EXPECT_EQ(cfg.optimizer.momentum, def.optimizer.momentum);
    EXPECT_EQ(cfg.optimizer.weight_decay, def.optimizer.weight_decay);
    EXPECT_EQ(cfg.optimizer.beta1, def.optimizer.beta1);
    EXPECT_EQ(cfg.optimizer.beta2, def.optimizer.beta2);
    EXPECT_EQ(cfg.optimizer.eps, def.optimizer.eps);
    EXPECT_EQ(cfg.bucket_mb, def.bucket_mb);
}

TEST(ConfigPresets, CiSmallIsTinyWithSeveralBuckets) {
    TrainConfig cfg = load_config_file(preset_path("ci-small.yaml"));
    validate_config(cfg);
    EXPECT_EQ(cfg.mlp.input_dim, 64);
    EXPECT_EQ(cfg.mlp.hidden, (std::vector<int>{128, 128}));
    EXPECT_EQ(cfg.mlp.num_classes, 10);
    EXPECT_EQ(cfg.batch_size, 32);
    EXPECT_EQ(cfg.steps, 10);
    EXPECT_EQ(cfg.warmup, 2);
    // Several buckets even under DDP's rule (a bucket closes once it holds bucket_mb,
    // parameters never split), which gives the fewest. Parameters in backward order:
    // each layer's bias, then its weight, last layer first.
    std::vector<int64_t> param_bytes;
    std::vector<int> widths = {cfg.mlp.input_dim};
    widths.insert(widths.end(), cfg.mlp.hidden.begin(), cfg.mlp.hidden.end());
    widths.push_back(cfg.mlp.num_classes);
    for (size_t layer = widths.size() - 1; layer >= 1; --layer) {
        param_bytes.push_back(4 * int64_t{widths[layer]});
        param_bytes.push_back(4 * int64_t{widths[layer - 1]} * widths[layer]);
    }
    double cap = cfg.bucket_mb * 1024 * 1024;
    int buckets = 0;
    double filled = 0;
    for (int64_t bytes : param_bytes) {
        filled += static_cast<double>(bytes);
        if (filled >= cap) ++buckets, filled = 0;
    }
    if (filled > 0) ++buckets;
    EXPECT_GE(buckets, 3) << "bucket_mb " << cfg.bucket_mb;
}

TEST(ConfigPresets, MlpLargeIsTheGpuBenchmark) {
    TrainConfig cfg = load_config_file(preset_path("mlp-large.yaml"));
    validate_config(cfg);
    EXPECT_EQ(cfg.mlp.input_dim, 8192);
    EXPECT_EQ(cfg.mlp.hidden, std::vector<int>(8, 8192));
    EXPECT_EQ(cfg.mlp.num_classes, 1024);
    EXPECT_EQ(cfg.mlp.activation, Activation::relu);
    EXPECT_EQ(cfg.precision, Precision::bf16);
    EXPECT_EQ(cfg.batch_size, 1024);
    EXPECT_EQ(cfg.optimizer.kind, OptimizerConfig::Kind::adamw);
    EXPECT_EQ(cfg.bucket_mb, 25.0);
    EXPECT_EQ(cfg.steps, 50);
    EXPECT_EQ(cfg.warmup, 10);
}

// ---------------------------------------------------------------- validate_config (after flags)

TEST(ConfigValidate, DefaultIsValid) { EXPECT_EQ(validate_error(TrainConfig{}), "<valid>"); }

TEST(ConfigValidate, OverriddenValuesAreRecheckedWithoutALine) {
    TrainConfig cfg;
    cfg.source = "run.yaml";
    cfg.steps = 0;
    EXPECT_EQ(validate_error(cfg), "run.yaml: key 'steps': must be >= 1, got 0 (steps plus warmup must fit a 32-bit int)");
    cfg = TrainConfig{};
    cfg.warmup = -2;
    EXPECT_EQ(validate_error(cfg), "<built-in default>: key 'warmup': must be >= 0, got -2 (steps plus warmup must fit a 32-bit int)");
    cfg = TrainConfig{};
    cfg.batch_size = 0;
    EXPECT_EQ(validate_error(cfg), "<built-in default>: key 'batch_size': must be >= 1, got 0 (2^24 rows per rank keeps a global batch over 2^20 ranks inside 2^44)");
    cfg = TrainConfig{};
    cfg.mlp.hidden = {64, 2000000};
    EXPECT_EQ(validate_error(cfg), "<built-in default>: key 'mlp.hidden[1]': must be <= 1048576, got 2000000 (a layer of 2^20 units is past any model measured; products of widths stay in 64 bits)");
    cfg = TrainConfig{};
    cfg.mlp.hidden.clear();
    EXPECT_EQ(validate_error(cfg), "<built-in default>: key 'mlp.hidden': must be a non-empty list");
    cfg = TrainConfig{};
    cfg.bucket_mb = 0.0;
    EXPECT_EQ(validate_error(cfg), "<built-in default>: key 'bucket_mb': must be in (0, 4096], got 0 (4 GiB buckets are past any GPU's all-reduce buffer)");
    cfg = TrainConfig{};
    cfg.optimizer.lr = 0.0f;
    EXPECT_EQ(validate_error(cfg), "<built-in default>: key 'optimizer.lr': must be > 0, got 0 (a rate, scale or epsilon: zero would do nothing)");
    cfg = TrainConfig{};
    cfg.optimizer.beta2 = 1.0f;
    EXPECT_EQ(validate_error(cfg), "<built-in default>: key 'optimizer.beta2': must be in [0, 1), got 1 (a probability or moment decay: 1 would never update)");
    cfg = TrainConfig{};
    cfg.model = "cnn";
    EXPECT_EQ(validate_error(cfg), "<built-in default>: key 'model': unknown value 'cnn'; valid values: mlp, transformer, resnet");
    cfg = TrainConfig{};
    cfg.out = "";
    EXPECT_EQ(validate_error(cfg), "<built-in default>: key 'out': must be a non-empty string");
}

TEST(ConfigValidate, ScalingListAfterFlags) {
    TrainConfig cfg;
    cfg.scaling = {};  // the launched world size
    EXPECT_EQ(validate_error(cfg), "<valid>");
    cfg.scaling = {1, 2, 2};
    EXPECT_EQ(validate_error(cfg), "<built-in default>: key 'scaling': 2 is given twice (entries 2 and 3)");
    cfg.scaling = {2, 1};
    EXPECT_EQ(validate_error(cfg),
              "<built-in default>: key 'scaling[1]': world sizes must be strictly increasing, got 1 after 2");
    cfg.scaling = {0};
    EXPECT_EQ(validate_error(cfg), "<built-in default>: key 'scaling[0]': must be >= 1, got 0 (2^20 ranks is past any cluster; products with the batch stay in 64 bits)");
}

// ---------------------------------------------------------------- world size rules

TEST(ConfigWorld, ScalingEntriesMustFitTheLaunch) {
    TrainConfig cfg = parse_config("scaling: [1, 2, 8]\n", "s.yaml");
    EXPECT_EQ(world_error(cfg, 8), "<valid>");
    EXPECT_EQ(world_error(cfg, 4),
              "s.yaml:1:10: key 'scaling': scaling entry 8 exceeds the launched world size 4 (mpirun -np 4)");
    cfg.scaling.clear();  // empty means 1, 2, 4, ... and the launched size
    EXPECT_EQ(world_error(cfg, 3), "<valid>");
}

TEST(ConfigWorld, StrongScalingNeedsADivisibleBatch) {
    TrainConfig cfg = parse_config("scaling_mode: strong\nbatch_size: 100\nscaling: [1, 2, 3, 4]\n", "s.yaml");
    EXPECT_EQ(world_error(cfg, 4),
              "s.yaml:2:13: key 'batch_size': batch_size 100 is not divisible by world size 3 (scaling_mode: strong)");
    cfg.scaling = {1, 2, 4};
    EXPECT_EQ(world_error(cfg, 4), "<valid>");
    cfg.scaling.clear();  // 1, 2 and the launched 4 are measured
    EXPECT_EQ(world_error(cfg, 4), "<valid>");
    EXPECT_EQ(world_error(cfg, 3),
              "s.yaml:2:13: key 'batch_size': batch_size 100 is not divisible by world size 3 (scaling_mode: strong)");
    cfg.scaling_mode = ScalingMode::weak;  // weak scaling: any batch works
    EXPECT_EQ(world_error(cfg, 3), "<valid>");
}

// Weak scaling's global batch is the batch times the ranks: past what a dataset indexes, it is
// refused naming the key, never wrapped around.
TEST(ConfigWorld, AGlobalBatchPastTheBoundIsRefused) {
    TrainConfig cfg = parse_config("batch_size: 16777216\n", "g.yaml");
    EXPECT_EQ(world_error(cfg, 127), "<valid>");  // 2^31 - 2^24 rows
    cfg.scaling = {1, 64};  // ranks past the largest world measured stay idle
    EXPECT_EQ(world_error(cfg, 256), "<valid>");
    cfg.scaling.clear();
    EXPECT_EQ(world_error(cfg, 128),
              "g.yaml:1:13: key 'batch_size': batch_size 16777216 on 128 ranks is a global batch of 2147483648; at most "
              "2147483647 (scaling_mode: weak multiplies the batch by the ranks)");
    cfg.scaling_mode = ScalingMode::strong;  // the global batch is the batch itself
    cfg.scaling = {1, 2, 4};
    EXPECT_EQ(world_error(cfg, 256), "<valid>");
}

TEST(ConfigWorld, PerRankBatch) {
    TrainConfig cfg;
    cfg.batch_size = 96;
    EXPECT_EQ(per_rank_batch(cfg, 1), 96);
    EXPECT_EQ(per_rank_batch(cfg, 4), 96);
    cfg.scaling_mode = ScalingMode::strong;
    EXPECT_EQ(per_rank_batch(cfg, 1), 96);
    EXPECT_EQ(per_rank_batch(cfg, 4), 24);
    EXPECT_EQ(per_rank_batch(cfg, 3), 32);
}

// ---------------------------------------------------------------- to_json

TEST(ConfigJson, FullResolvedConfigWithYamlKeyNames) {
    TrainConfig cfg = parse_config(
        "mlp: {hidden: [32, 16], activation: tanh}\n"
        "scaling: [1, 2]\n"
        "scaling_mode: strong\n"
        "precision: fp16\n"
        "optimizer: {kind: sgd, lr: 0.05}\n"
        "backend: cpu\n"
        "seed: 7\n",
        "j.yaml");
    nlohmann::json j = to_json(cfg);
    nlohmann::json want = {
        {"source", "j.yaml"},
        {"model", "mlp"},
        {"mlp",
         {{"input_dim", 256}, {"hidden", {32, 16}}, {"num_classes", 16}, {"activation", "tanh"}, {"teacher_hidden", 32}}},
        {"transformer",
         {{"arch", "bert"},
          {"layers", 12},
          {"hidden", 768},
          {"heads", 12},
          {"ffn", 3072},
          {"vocab", 30522},
          {"seq_len", 128},
          {"max_positions", 512},
          {"type_vocab", 2},
          {"dropout", 0.1},
          {"attention_dropout", 0.1},
          {"layernorm_eps", 1e-12},
          {"mask_prob", 0.15}}},
        {"resnet", {{"blocks", {3, 4, 6, 3}}, {"width", 64}, {"image_size", 224}, {"num_classes", 1000}, {"bn_eps", 1e-5}}},
        {"batch_size", 128},
        {"scaling_mode", "strong"},
        {"scaling", {1, 2}},
        {"steps", 20},
        {"warmup", 3},
        {"dataset_batches", 8},
        {"precision", "fp16"},
        {"optimizer",
         {{"kind", "sgd"},
          {"lr", 0.05},
          {"momentum", 0.9},
          {"weight_decay", 0.0},
          {"beta1", 0.9},
          {"beta2", 0.999},
          {"eps", 1e-8}}},
        {"bucket_mb", 25.0},
        {"grad_dtype", "fp32"},
        {"sharding", "none"},
        {"seed", 7},
        {"backend", "cpu"},
        {"share_gpu", false},
        {"out", "runs/train.jsonl"},
        {"cuda_graphs", true},
        {"conv_engine", "auto"},
        {"sdc_check_every", 100},
    };
    EXPECT_EQ(j, want) << j.dump(2);
    // Every YAML key has its JSON counterpart, so the JSON reads back as a config.
    EXPECT_EQ(j["mlp"].size(), 5u);
    EXPECT_EQ(j["optimizer"].size(), 7u);
    EXPECT_EQ(j["transformer"].size(), 13u);
    EXPECT_EQ(j["resnet"].size(), 5u);
    EXPECT_EQ(j.size(), 23u);  // the 22 YAML keys and the source
    EXPECT_EQ(j["scaling"].dump(), "[1,2]");
    EXPECT_EQ(j["optimizer"]["lr"].dump(), "0.05");  // fp32 fields written by their shortest text
}

TEST(ConfigJson, JsonOfTheDefaultReadsBackAsYaml) {
    // JSON is YAML: the record of a run is itself a valid config giving the same run.
    TrainConfig def;
    def.scaling = {1, 2, 4};
    nlohmann::json j = to_json(def);
    j.erase("source");
    TrainConfig back = parse_config(j.dump(), "record.json");
    nlohmann::json again = to_json(back);
    again.erase("source");
    EXPECT_EQ(again, j);
}

}  // namespace
TEST(Config, GradDtypeTakesTheAllReduceDtypes) {
    EXPECT_EQ(parse_config("grad_dtype: bf16\n", "g.yaml").grad_dtype, DType::bf16);
    EXPECT_EQ(parse_config("grad_dtype: fp16\n", "g.yaml").grad_dtype, DType::f16);
    EXPECT_EQ(parse_grad_dtype("fp32"), DType::f32);
    EXPECT_THROW(parse_grad_dtype("int8"), UserError);
    try {
        parse_config("steps: 2\ngrad_dtype: bf61\n", "g.yaml");
        FAIL() << "a bad grad_dtype must be rejected";
    } catch (const UserError& e) {
        EXPECT_EQ(std::string(e.what()).rfind("g.yaml:2:13: key 'grad_dtype': unknown value 'bf61'", 0), 0u) << e.what();
    }
}

}  // namespace sb

namespace sb {
namespace {

TEST(ConfigParse, CudaGraphsAndSdcCheckEvery) {
    TrainConfig cfg = parse_config("cuda_graphs: false\nsdc_check_every: 7\n", "t.yaml");
    EXPECT_FALSE(cfg.cuda_graphs);
    EXPECT_EQ(cfg.sdc_check_every, 7);
    EXPECT_EQ(to_json(cfg)["cuda_graphs"], false);
    EXPECT_EQ(to_json(cfg)["sdc_check_every"], 7);
    EXPECT_EQ(parse_config("sdc_check_every: 0\n", "t.yaml").sdc_check_every, 0);  // 0 = off
}

TEST(ConfigErrors, CudaGraphsTakesOnlyTrueOrFalse) {
    EXPECT_EQ(parse_error("steps: 3\ncuda_graphs: yes\n"), "t.yaml:2:14: key 'cuda_graphs': expected true or false, got 'yes'");
    EXPECT_EQ(parse_error("cuda_graphs: \"true\"\n"), "t.yaml:1:14: key 'cuda_graphs': expected true or false, got 'true'");
    EXPECT_EQ(parse_error("cuda_graphs: [true]\n"), "t.yaml:1:14: key 'cuda_graphs': expected true or false, got a list");
}

TEST(ConfigParse, ConvEngineIsAutoIm2colOrCudnn) {
    EXPECT_FALSE(parse_config("steps: 3\n", "t.yaml").conv_engine.has_value());  // auto by default
    EXPECT_FALSE(parse_config("conv_engine: auto\n", "t.yaml").conv_engine.has_value());
    EXPECT_EQ(parse_config("conv_engine: im2col\n", "t.yaml").conv_engine, ConvEngine::im2col);
    // Every build reads cudnn: a record of a cuDNN run is a config too (project, compare).
    EXPECT_EQ(parse_config("conv_engine: cudnn\n", "t.yaml").conv_engine, ConvEngine::cudnn);
    EXPECT_EQ(to_json(parse_config("conv_engine: im2col\n", "t.yaml"))["conv_engine"], "im2col");
    EXPECT_EQ(to_json(parse_config("conv_engine: cudnn\n", "t.yaml"))["conv_engine"], "cudnn");
    EXPECT_EQ(to_json(parse_config("steps: 3\n", "t.yaml"))["conv_engine"], "auto");
}

TEST(ConfigErrors, ConvEngineNamesTheValidChoices) {
    EXPECT_EQ(parse_error("conv_engine: winograd\n"),
              "t.yaml:1:14: key 'conv_engine': unknown value 'winograd'; valid values: auto, im2col, cudnn");
    EXPECT_EQ(parse_error("conv_engine: cudn\n"),
              "t.yaml:1:14: key 'conv_engine': unknown value 'cudn'; valid values: auto, im2col, cudnn; did you mean "
              "'cudnn'?");
    EXPECT_EQ(parse_error("conv_engine: [cudnn]\n"),
              "t.yaml:1:14: key 'conv_engine': expected one of auto, im2col, cudnn, got a list");
}

TEST(ConfigErrors, SdcCheckEveryIsANonNegativeInteger) {
    EXPECT_EQ(parse_error("sdc_check_every: -1\n"), "t.yaml:1:18: key 'sdc_check_every': must be >= 0, got -1 (a step count: the steps bound)");
    EXPECT_EQ(parse_error("sdc_check_every: 2.5\n"), "t.yaml:1:18: key 'sdc_check_every': expected an integer, got '2.5'");
}

}  // namespace
}  // namespace sb
