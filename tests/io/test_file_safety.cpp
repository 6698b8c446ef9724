// Writes never go through links nor truncate a file in place; checkpoint
// saves replace only mantissa's own checkpoints and clean up only what
// carries its marker; manifests name only checkpoint files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "mantissa/train/checkpoint.hpp"
#include "mantissa/io/files.hpp"
#include "mantissa/nn/mlp.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
namespace io = mantissa::io;
namespace nn = mantissa::nn;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

nn::MLP tiny_mlp() {
  nn::MLPConfig c;
  c.inputs = 3;
  c.hidden = {2};
  c.classes = 2;
  return nn::MLP(c);
}

}  // namespace

TEST(WriteFileAtomic, ReplacesALinkInsteadOfWritingThroughIt) {
  TempDir d("safety");
  d.write("victim", "someone else's\n");
  fs::create_symlink(d / "victim", d / "out");
  // The fixed temporary name older versions used, planted as a link too.
  fs::create_symlink(d / "victim", d / "out.tmp");
  io::write_file_atomic(d / "out", "new\n");
  EXPECT_EQ(io::read_file(d / "victim"), "someone else's\n");
  EXPECT_FALSE(fs::is_symlink(d / "out"));
  EXPECT_EQ(io::read_file(d / "out"), "new\n");
  EXPECT_TRUE(fs::is_symlink(d / "out.tmp"));
  // No temporaries left behind.
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(d.path)) ++entries;
  EXPECT_EQ(entries, 3);
}

TEST(WriteFileAtomic, ConcurrentWritersOfOnePathNeverMixTheirBytes) {
  TempDir d("safety");
  const std::string a(100000, 'a'), b(70000, 'b');
  std::thread ta([&] { for (int i = 0; i < 30; ++i) io::write_file_atomic(d / "f", a); });
  std::thread tb([&] { for (int i = 0; i < 30; ++i) io::write_file_atomic(d / "f", b); });
  ta.join();
  tb.join();
  const std::string got = io::read_file(d / "f");
  EXPECT_TRUE(got == a || got == b) << got.size() << " bytes";
}

TEST(FileSafety, ReplaceableFilesAreMantissasOwnOnly) {
  TempDir d("safety");
  d.write("mine.jsonl", "{\"run\":{}}\n");
  d.write("theirs.txt", "{\"ru");
  fs::create_symlink(d / "mine.jsonl", d / "link");
  EXPECT_NO_THROW(io::check_replaceable_file(d / "absent", "{\"run\":", "--metrics"));
  EXPECT_NO_THROW(io::check_replaceable_file(d / "mine.jsonl", "{\"run\":", "--metrics"));
  EXPECT_NE(error_of([&] { io::check_replaceable_file(d / "theirs.txt", "{\"run\":", "--metrics"); })
                .find("--metrics '" + (d / "theirs.txt") + "' exists and was not written by mantissa"),
            std::string::npos);
  EXPECT_NE(error_of([&] { io::check_replaceable_file(d / "link", "{\"run\":", "--metrics"); }).find("symbolic link"),
            std::string::npos);
  EXPECT_NE(error_of([&] { io::check_replaceable_file(d.path.string(), "{\"run\":", "--metrics"); })
                .find("not a regular file"),
            std::string::npos);
  // Output over an input, or a directory output holding one.
  d.write("data/corpus.txt", "text");
  EXPECT_NE(error_of([&] { io::refuse_output_over_input(d / "data/corpus.txt", "--save", {{"--data", d / "data/corpus.txt"}}); })
                .find("would overwrite the input --data"),
            std::string::npos);
  EXPECT_NE(error_of([&] { io::refuse_output_over_input(d / "data/", "--save", {{"--data", d / "data/corpus.txt"}}); })
                .find("--data"),
            std::string::npos);
  EXPECT_NO_THROW(io::refuse_output_over_input(d / "other", "--save", {{"--data", d / "data/corpus.txt"}}));
}

TEST(CheckpointSafety, SaveRefusesWhatIsNotACheckpointAndLeavesItIntact) {
  TempDir d("safety");
  nn::MLP m = tiny_mlp();
  d.write("user/a.txt", "a");
  d.write("file.txt", "f");
  fs::create_directory_symlink(d / "user", d / "link");
  for (const std::string& target : {d / "user", d / "user/", d / "user/.", d / "file.txt", d / "link"}) {
    const std::string msg = error_of([&] { mantissa::train::save_checkpoint(target, m, nullptr, "{}"); });
    EXPECT_NE(msg.find("mantissa replaces only its own checkpoints"), std::string::npos) << target << ": " << msg;
  }
  EXPECT_EQ(io::read_file(d / "user/a.txt"), "a");
  EXPECT_EQ(io::read_file(d / "file.txt"), "f");
  EXPECT_TRUE(fs::is_symlink(d / "link"));
  EXPECT_NE(error_of([&] { mantissa::train::save_checkpoint(".", m, nullptr, "{}"); }).find("does not name a directory"),
            std::string::npos);
  // Nothing was created beside them either.
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(d.path)) ++entries;
  EXPECT_EQ(entries, 3);
}

TEST(CheckpointSafety, CleanupTouchesOnlyMarkedDirectoriesAndOwnFileNames) {
  TempDir d("safety");
  nn::MLP m = tiny_mlp();
  d.write("ck.tmp-user/model.safetensors", "user's file with a checkpoint name");
  d.write("ck.old-user/config.json", "user's");
  d.write("ck.tmp-1-1/.mantissa-partial", "");
  d.write("ck.tmp-1-1/config.json.tmp-1-7", "half");
  d.write("ck.tmp-1-1/mine.txt", "a user file dropped into a temporary");
  fs::create_directories(d / "ck.tmp-1-2");  // killed before marking: empty
  mantissa::train::save_checkpoint(d / "ck", m, nullptr, "{\"step\":1}");
  mantissa::train::save_checkpoint(d / "ck", m, nullptr, "{\"step\":2}");
  EXPECT_EQ(io::read_file(d / "ck.tmp-user/model.safetensors"), "user's file with a checkpoint name");
  EXPECT_EQ(io::read_file(d / "ck.old-user/config.json"), "user's");
  EXPECT_FALSE(fs::exists(d / "ck.tmp-1-1/config.json.tmp-1-7"));
  EXPECT_EQ(io::read_file(d / "ck.tmp-1-1/mine.txt"), "a user file dropped into a temporary");
  EXPECT_FALSE(fs::exists(d / "ck.tmp-1-2"));
  // A user file put inside the checkpoint survives its replacement (left in
  // the swapped-out directory, which is then not removed).
  d.write("ck/notes.txt", "kept");
  mantissa::train::save_checkpoint(d / "ck", m, nullptr, "{\"step\":3}");
  bool found = false;
  for (const auto& e : fs::directory_iterator(d.path))
    found = found || (fs::exists(e.path() / "notes.txt") && io::read_file((e.path() / "notes.txt").string()) == "kept");
  EXPECT_TRUE(found);
  nn::MLP back = tiny_mlp();
  EXPECT_EQ(mantissa::train::load_checkpoint(d / "ck", back, nullptr).trainer_state, "{\"step\":3}");
}

TEST(CheckpointSafety, ManifestNamesOnlyCheckpointFiles) {
  TempDir d("safety");
  nn::MLP m = tiny_mlp();
  mantissa::train::save_checkpoint(d / "ck", m, nullptr, "{}");
  const auto good = nlohmann::json::parse(io::read_file(d / "ck/COMPLETE"));
  for (const char* bad : {"../../etc/passwd", "/dev/zero", "x/../model.safetensors", "COMPLETE"}) {
    auto j = good;
    j["files"][bad] = {{"bytes", 0}, {"crc32", 0}};
    io::write_file_atomic(d / "ck/COMPLETE", j.dump());
    nn::MLP b = tiny_mlp();
    const std::string msg = error_of([&] { mantissa::train::load_checkpoint(d / "ck", b, nullptr); });
    EXPECT_NE(msg.find(std::string("names '") + bad + "', which is not a checkpoint file"), std::string::npos) << msg;
  }
  auto j = good;
  j["files"]["config.json"]["bytes"] = -1;
  io::write_file_atomic(d / "ck/COMPLETE", j.dump());
  nn::MLP b = tiny_mlp();
  EXPECT_NE(error_of([&] { mantissa::train::load_checkpoint(d / "ck", b, nullptr); }).find("lacks unsigned"), std::string::npos);
  EXPECT_NE(error_of([&] { mantissa::train::read_model_config(d / "ck"); }).find("lacks unsigned"), std::string::npos);
}
