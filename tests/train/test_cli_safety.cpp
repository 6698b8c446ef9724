// What `mantissa train / eval / experiment` may read, write and delete, end
// to end: an output path that is not mantissa's own is refused before any
// training with exit code 2 and every byte of it left as it was; writes never
// go through links; no script found on disk is run; crafted checkpoints
// (config, manifest, trainer state, tensor dtypes) are refused with a
// message naming the problem.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "mantissa/io/files.hpp"
#include "mantissa/io/safetensors.hpp"
#include "mantissa/train/config.hpp"
#include "mantissa/train/session.hpp"
#include "train/cli_util.hpp"

namespace fs = std::filesystem;
using namespace mantissa;

namespace {

using cli_test::Result;

Result run_in(const std::string& cwd, const std::string& exe, const std::string& args, const std::string& env = "") {
  return cli_test::run_command("cd '" + cwd + "' && " + env + " '" + exe + "' " + args);
}

// Every entry under root (links not followed): relative path -> kind and bytes.
std::map<std::string, std::string> snapshot(const fs::path& root) {
  std::map<std::string, std::string> m;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(root, ec))) return m;
  if (!fs::is_directory(fs::symlink_status(root, ec))) {
    m[""] = fs::is_symlink(fs::symlink_status(root, ec)) ? "link:" + fs::read_symlink(root).string()
                                                          : "file:" + io::read_file(root.string());
    return m;
  }
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    const std::string rel = fs::relative(e.path(), root).string();
    if (e.is_symlink()) m[rel] = "link:" + fs::read_symlink(e.path()).string();
    else if (e.is_directory()) m[rel] = "dir";
    else m[rel] = "file:" + io::read_file(e.path().string());
  }
  return m;
}

class CliSafety : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mantissa_cli_safety_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write("corpus.txt", cli_test::word_corpus(6000, 5));
    // A user's project folder: files, a subfolder, and names a save's
    // temporaries could collide with.
    write("proj/notes.txt", "my notes\n");
    write("proj/sub/data.bin", std::string("\x00\x01\x02", 3));
    write("proj/.tmp-keep", "not mantissa's\n");
    write("ckpt.tmp-mine/x.txt", "user's sibling\n");
    write("ckpt.old-mine/y.txt", "user's sibling\n");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& content) {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(path(name), std::ios::binary) << content;
  }
  Result run(const std::string& args) { return run_in(dir_.string(), MANTISSA_CLI, args); }
  std::string tiny(int steps = 3) const {
    return "train --model gpt --data " + path("corpus.txt") + " --layers 1 --d-model 16 --heads 2 --seq-len 16 "
           "--batch-size 2 --threads 1 --warmup 1 --eval-batches 1 --steps " + std::to_string(steps);
  }
  // A refused command: exit 2, the message names `what`, no step was trained.
  static void expect_refused(const Result& r, const std::string& what) {
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find(what), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << "trained before refusing:\n" << r.out;
  }
  // Rewrites one file of checkpoint `ck` and its manifest entry, so only the
  // content (not the CRC) is wrong.
  void replace_in_checkpoint(const std::string& ck, const std::string& name, const std::string& bytes) {
    io::write_file_atomic(path(ck + "/" + name), bytes);
    auto m = nlohmann::json::parse(io::read_file(path(ck + "/COMPLETE")));
    m["files"][name] = {{"bytes", bytes.size()}, {"crc32", io::crc32(bytes.data(), bytes.size())}};
    io::write_file_atomic(path(ck + "/COMPLETE"), m.dump());
  }
  fs::path dir_;
};

TEST_F(CliSafety, SaveOverAUsersDirectoryOrFileIsRefusedBeforeTrainingAndLeavesItIntact) {
  const auto before = snapshot(dir_);
  expect_refused(run(tiny() + " --save " + path("proj")), "not a mantissa checkpoint");
  expect_refused(run(tiny() + " --save " + path("proj") + "/."), "not a mantissa checkpoint");
  expect_refused(run(tiny() + " --save " + path("proj") + "/"), "not a mantissa checkpoint");
  expect_refused(run(tiny() + " --save " + path("proj/notes.txt")), "not a directory");
  expect_refused(run(tiny() + " --save " + path("corpus.txt")), "--data");
  expect_refused(run(tiny() + " --save ."), "--data");  // the corpus lives in the working directory
  fs::create_directory_symlink(path("proj"), path("link"));
  expect_refused(run(tiny() + " --save " + path("link")), "symbolic link");
  fs::remove(path("link"));
  EXPECT_EQ(snapshot(dir_), before);
}

TEST_F(CliSafety, SavesReplaceOnlyTheirOwnCheckpointAndLeaveUserSiblingsAlone) {
  const auto siblings = snapshot(dir_ / "ckpt.tmp-mine");
  Result r = run(tiny() + " --save " + path("ckpt"));
  ASSERT_EQ(r.code, 0) << r.out;
  // A save killed midway leaves a marked temporary; the next save removes it.
  write("ckpt.tmp-1-0/.mantissa-partial", "");
  write("ckpt.tmp-1-0/model.safetensors", "partial");
  r = run(tiny(4) + " --save " + path("ckpt"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(fs::exists(path("ckpt.tmp-1-0")));
  EXPECT_EQ(snapshot(dir_ / "ckpt.tmp-mine"), siblings);
  EXPECT_TRUE(fs::exists(path("ckpt.old-mine/y.txt")));
  EXPECT_TRUE(fs::exists(path("ckpt/COMPLETE")));
  // Exactly the checkpoint files, nothing else.
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(path("ckpt"))) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"COMPLETE", "config.json", "model.safetensors", "optimizer.json",
                                          "optimizer.safetensors", "trainer_state.json"}));
  // An empty directory is fine to save into.
  fs::create_directories(path("empty"));
  EXPECT_EQ(run(tiny(1) + " --save " + path("empty")).code, 0);
  EXPECT_TRUE(fs::exists(path("empty/COMPLETE")));
}

TEST_F(CliSafety, MetricsNeverTruncatesForeignFilesNorFollowsLinks) {
  const auto before = snapshot(dir_);
  expect_refused(run(tiny() + " --metrics " + path("corpus.txt")), "--data");
  expect_refused(run(tiny() + " --metrics " + path("proj/notes.txt")), "not written by mantissa");
  expect_refused(run(tiny() + " --metrics " + path("proj")), "not a regular file");
  EXPECT_EQ(snapshot(dir_), before);
  // A link planted where the metrics go (another user's pre-created name):
  // refused, its target untouched.
  fs::create_symlink(path("proj/notes.txt"), path("m.jsonl"));
  expect_refused(run(tiny() + " --metrics " + path("m.jsonl")), "symbolic link");
  EXPECT_EQ(io::read_file(path("proj/notes.txt")), "my notes\n");
  fs::remove(path("m.jsonl"));
  // mantissa's own metrics file is replaced by the next run; a hard link to
  // it (a second name for the old file) keeps the old contents.
  ASSERT_EQ(run(tiny(2) + " --metrics " + path("m.jsonl")).code, 0);
  fs::create_hard_link(path("m.jsonl"), path("m-old.jsonl"));
  const std::string first = io::read_file(path("m-old.jsonl"));
  Result r = run(tiny(3) + " --metrics " + path("m.jsonl"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(io::read_file(path("m-old.jsonl")), first);
  EXPECT_NE(io::read_file(path("m.jsonl")), first);
  EXPECT_EQ(io::read_file(path("m.jsonl")).rfind("{\"run\":", 0), 0u);
}

TEST_F(CliSafety, OutputsMustBeWritableBeforeTheFirstStep) {
  // A file system nobody writes to (even root), and a parent that is a file.
  expect_refused(run(tiny() + " --save /proc/mantissa-ckpt"), "cannot create files in '/proc'");
  expect_refused(run(tiny() + " --metrics /proc/mantissa.jsonl"), "cannot create files in '/proc'");
  expect_refused(run(tiny() + " --save " + path("corpus.txt/ckpt")), "is not a directory");
  fs::create_directories(path("ro"));
  fs::permissions(path("ro"), fs::perms::owner_read | fs::perms::owner_exec);
  if (::access(path("ro").c_str(), W_OK) == 0) GTEST_SKIP() << "running as root: permissions are not enforced";
  expect_refused(run(tiny() + " --save " + path("ro/ckpt")), "cannot create files in");
  expect_refused(run(tiny() + " --metrics " + path("ro/m.jsonl")), "cannot create files in");
  fs::permissions(path("ro"), fs::perms::owner_all);
}

// A copy of the binary in a folder holding a planted scripts/data.sh (where
// the repository's own would be), started from another folder with one too:
// without --data and without data on disk, it names the command to run and
// runs nothing.
TEST_F(CliSafety, MissingDefaultDataNamesTheCommandAndRunsNoScript) {
  fs::create_directories(path("bin"));
  fs::copy_file(MANTISSA_CLI, path("bin/mantissa"));
  fs::permissions(path("bin/mantissa"), fs::perms::owner_all);
  const std::string planted = "#!/bin/sh\ntouch '" + path("PWNED") + "'\n";
  write("scripts/data.sh", planted);
  write("cwd/scripts/data.sh", planted);
  fs::create_directories(path("nodata"));
  const std::string env = "MANTISSA_DATA='" + path("nodata") + "'";
  for (const char* model : {"gpt", "mlp"}) {
    Result r = run_in(path("cwd"), path("bin/mantissa"), std::string("train --model ") + model + " --steps 1", env);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("bash " + path("scripts/data.sh")), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--data"), std::string::npos) << r.out;
    for (const char* looked : {"nodata", ".cache/data", "cwd/.cache/data"})
      EXPECT_NE(r.out.find(path(looked)), std::string::npos) << "names where it looked: " << looked << "\n" << r.out;
  }
  Result r = run_in(path("cwd"), path("bin/mantissa"), "eval --checkpoint " + path("nothing"), env);
  EXPECT_NE(r.code, 0);
  // With no script beside the binary, it names none on disk.
  fs::remove(path("scripts/data.sh"));
  r = run_in(path("cwd"), path("bin/mantissa"), "train --model gpt --steps 1", env);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("`bash scripts/data.sh` in the mantissa repository"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("bash " + path("scripts/data.sh")), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("PWNED")));
}

TEST_F(CliSafety, ExperimentRefusesAUsersOutDirectory) {
  const auto before = snapshot(dir_);
  Result r = run("experiment --out " + path("proj") + " --data " + path("corpus.txt"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("is a directory mantissa did not create"), std::string::npos) << r.out;
  EXPECT_EQ(snapshot(dir_), before);
}

// Crafted model directories and checkpoints: a clear error (exit 2), never a
// crash or a huge allocation.
// Run records and checkpoints are JSON, which holds UTF-8 only: a path or a
// name that is not is refused up front, not when the first record is written.
TEST_F(CliSafety, TextJsonCannotHoldIsRefusedBeforeTraining) {
  for (const std::string& extra : {" --save '" + path("ck\xff") + "'", std::string(" --set 'name=run\xfe'"),
                                   " --metrics '" + path("m\xc0\xaf.jsonl") + "'"}) {
    const Result r = run(tiny(2) + extra);
    expect_refused(r, "not valid UTF-8");
  }
  EXPECT_FALSE(fs::exists(path("ck\xff")));
  EXPECT_FALSE(fs::exists(path("m\xc0\xaf.jsonl")));
  // The library refuses the same, naming the setting.
  train::TrainConfig c;
  c.save = "ck\xff";
  try {
    train::validate(c);
    ADD_FAILURE() << "a non-UTF-8 --save was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--save: not valid UTF-8 (byte 0xFF at offset 2", 0), 0u) << e.what();
  }
  c.save.clear();
  c.set = {"description=\xed\xa0\x80"};  // a UTF-16 surrogate, which UTF-8 excludes
  try {
    (void)train::resolve_recipe(c);
    ADD_FAILURE() << "a surrogate in a recipe description was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("recipe setting 'description': not valid UTF-8 (byte 0xED at offset 0", 0), 0u)
        << e.what();
  }
}

TEST_F(CliSafety, CraftedConfigsAreRefusedBeforeAModelIsBuilt) {
  ASSERT_EQ(run(tiny(2) + " --save " + path("ck")).code, 0);
  const std::string good = io::read_file(path("ck/config.json"));
  auto cfg = nlohmann::json::parse(good);
  // A model directory (no manifest) with an absurd vocabulary.
  fs::create_directories(path("model"));
  fs::copy_file(path("ck/model.safetensors"), path("model/model.safetensors"));
  cfg["vocab_size"] = int64_t{1} << 62;
  write("model/config.json", cfg.dump());
  Result r = run("eval --checkpoint " + path("model") + " --data " + path("corpus.txt"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("vocab must be in [1, 16777216]"), std::string::npos) << r.out;
  // Dimensions each in range whose product is not.
  cfg["vocab_size"] = 256;
  cfg["n_embd"] = 65536;
  cfg["n_head"] = 1;
  cfg["n_layer"] = 65536;
  write("model/config.json", cfg.dump());
  r = run("eval --checkpoint " + path("model") + " --data " + path("corpus.txt"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("parameters, more than"), std::string::npos) << r.out;
  // In a checkpoint the config must match the manifest before anything is built.
  write("ck/config.json", cfg.dump());
  for (const std::string& cmd : {"eval --checkpoint " + path("ck") + " --data " + path("corpus.txt"),
                                 tiny(4) + " --resume " + path("ck"), "analyse --checkpoint " + path("ck") +
                                 " --data " + path("corpus.txt") + " --out " + path("an")}) {
    r = run(cmd);
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find("config.json: "), std::string::npos) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find("the checkpoint manifest"), std::string::npos) << cmd << "\n" << r.out;
  }
  // ... and, if it matches, is still validated.
  replace_in_checkpoint("ck", "config.json", cfg.dump());
  r = run("eval --checkpoint " + path("ck") + " --data " + path("corpus.txt"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("parameters, more than"), std::string::npos) << r.out;
}

TEST_F(CliSafety, CraftedCheckpointFilesAreRefused) {
  ASSERT_EQ(run(tiny(2) + " --recipe fp16-master --save " + path("ck")).code, 0);
  const auto pristine = snapshot(dir_ / "ck");
  auto restore = [&] {
    fs::remove_all(path("ck"));
    for (const auto& [rel, v] : pristine)
      if (v != "dir") write("ck/" + rel, v.substr(5));
  };
  auto resume = [&] { return run(tiny(4) + " --recipe fp16-master --resume " + path("ck")); };
  ASSERT_EQ(resume().code, 0);  // the pristine checkpoint resumes
  restore();

  // The manifest may name only the checkpoint's own files.
  for (const char* bad : {"../../x", "/dev/zero", "notes.txt"}) {
    auto m = nlohmann::json::parse(io::read_file(path("ck/COMPLETE")));
    m["files"][bad] = {{"bytes", 0}, {"crc32", 0}};
    io::write_file_atomic(path("ck/COMPLETE"), m.dump());
    Result r = resume();
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find(std::string("names '") + bad + "', which is not a checkpoint file"), std::string::npos) << r.out;
    restore();
  }

  // Trainer-state counters out of range.
  for (const char* key : {"step", "tokens_seen", "updates"}) {
    auto st = nlohmann::json::parse(io::read_file(path("ck/trainer_state.json")));
    st[key] = -5;
    replace_in_checkpoint("ck", "trainer_state.json", st.dump());
    Result r = resume();
    EXPECT_EQ(r.code, 2) << key << "\n" << r.out;
    EXPECT_NE(r.out.find("out of range"), std::string::npos) << r.out;
    restore();
  }

  // An fp32 master copy replaced by 1-byte codes of the same shape: refused
  // (read as fp32 it would be a heap over-read).
  {
    io::SafetensorsFile st = io::load_safetensors(path("ck/optimizer.safetensors"));
    std::vector<std::pair<std::string, Tensor>> tensors;
    bool swapped = false;
    for (auto& [name, t] : st.tensors) {
      if (!swapped && name.rfind("extra.master.", 0) == 0) {
        tensors.emplace_back(name, Tensor::zeros(t.shape(), DType::e4m3fn));
        swapped = true;
      } else {
        tensors.emplace_back(name, t);
      }
    }
    ASSERT_TRUE(swapped) << "fp16-master keeps no master copies?";
    replace_in_checkpoint("ck", "optimizer.safetensors", io::encode_safetensors(tensors, st.metadata));
    Result r = resume();
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("master copy of"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("e4m3fn"), std::string::npos) << r.out;
    restore();
  }

  // A model tensor of the wrong dtype (same shape): refused, naming it.
  {
    io::SafetensorsFile st = io::load_safetensors(path("ck/model.safetensors"));
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (auto& [name, t] : st.tensors)
      tensors.emplace_back(name, name == "transformer.wte.weight" ? Tensor::zeros(t.shape(), DType::bf16) : t);
    replace_in_checkpoint("ck", "model.safetensors", io::encode_safetensors(tensors, st.metadata));
    Result r = resume();
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("transformer.wte.weight': dtype BF16 but"), std::string::npos) << r.out;
  }
}

TEST_F(CliSafety, HugeBatchSizesAreRefused) {
  write("huge.json", R"({"batch-size": 1152921504606846976})");
  Result r = run("train --model gpt --data " + path("corpus.txt") + " --layers 1 --d-model 16 --heads 2 --seq-len 16 "
                 "--threads 1 --steps 1 --config " + path("huge.json"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--batch-size 1152921504606846976 is too large"), std::string::npos) << r.out;
}

}  // namespace
