// A corrupt latest checkpoint falls back to the one its last save replaced
// (DIR.prev), with a message, and the run continues exactly as a resume of
// that older checkpoint does; a user's own DIR.prev is never used, removed or
// replaced; both corrupt is an error naming both.
#include <cmath>
#include <cstring>
#include <string>

#include "reliability/cli_util.hpp"

namespace {

using reliability::losses;
using reliability::read;
using reliability::run;
using reliability::write;
namespace fs = std::filesystem;

int step_of(const fs::path& dir) { return nlohmann::json::parse(read(dir / "trainer_state.json"))["step"].get<int>(); }

class Fallback : public reliability::Scratch {
 protected:
  // ck at step 4, ck.prev (kept by the second save) at step 2; ref: a plain
  // copy of the step-2 checkpoint, resumed directly as the reference.
  void SetUp() override {
    Scratch::SetUp();
    ASSERT_EQ(run(tiny("bf16-amp") + " --steps 2 --save " + path("ck")).code, 0);
    const auto r = run(tiny("bf16-amp") + " --steps 4 --resume " + path("ck") + " --save " + path("ck"));
    ASSERT_EQ(r.code, 0) << r.out;
    ASSERT_EQ(step_of(dir_ / "ck"), 4);
    ASSERT_EQ(step_of(dir_ / "ck.prev"), 2);
    fs::copy(dir_ / "ck.prev", dir_ / "ref");
    ASSERT_EQ(run(resume("ref") + " --metrics " + path("ref.jsonl")).code, 0);
    ASSERT_EQ(losses(path("ref.jsonl")).size(), 4u);
  }
  std::string resume(const std::string& dir) const { return tiny("bf16-amp") + " --steps 6 --resume " + path(dir); }
  std::string eval(const std::string& dir) const {
    return "eval --checkpoint " + path(dir) + " --data " + path("corpus.txt") + " --seq-len 16 --batch-size 2";
  }
  // A fresh copy of ck and ck.prev under name/ (so each case starts equal).
  std::string fresh(const std::string& name) {
    fs::create_directories(dir_ / name);
    fs::copy(dir_ / "ck", dir_ / name / "ck");
    fs::copy(dir_ / "ck.prev", dir_ / name / "ck.prev");
    return name + "/ck";
  }
};

TEST_F(Fallback, CorruptLatestFallsBackToThePreviousBitIdentically) {
  const std::string ref_val = run(eval("ref")).out;
  ASSERT_NE(ref_val.find("val_loss"), std::string::npos) << ref_val;
  struct Case {
    std::string name, problem;
  };
  const Case cases[] = {{"flip", "CRC-32 does not match"},
                        {"truncate", "(truncated)"},
                        {"nocomplete", "no COMPLETE marker"},
                        {"nan", "holds non-finite values"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string ck = fresh(c.name);
    const fs::path model = dir_ / ck / "model.safetensors";
    if (c.name == "flip") {
      std::string bytes = read(model);  // one weight byte; the manifest left as it is
      bytes[bytes.size() - 5] ^= 0x01;
      write(model, bytes);
    } else if (c.name == "truncate") {
      const std::string bytes = read(dir_ / ck / "optimizer.safetensors");
      write(dir_ / ck / "optimizer.safetensors", bytes.substr(0, bytes.size() / 2));
    } else if (c.name == "nocomplete") {
      fs::remove(dir_ / ck / "COMPLETE");
    } else {
      std::string bytes = read(model);  // a NaN under a matching manifest
      uint64_t n = 0;
      std::memcpy(&n, bytes.data(), 8);
      const float nan = std::nanf("");
      std::memcpy(bytes.data() + 8 + n, &nan, 4);
      reliability::replace_in_checkpoint(dir_ / ck, "model.safetensors", bytes);
    }
    const auto r = run(resume(ck) + " --metrics " + path(c.name + ".jsonl"));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("warning: checkpoint '" + path(ck) + "' is not usable"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(c.problem), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("using the previous checkpoint '" + path(ck) + ".prev' (step 2)"), std::string::npos) << r.out;
    // Every loss of the continuation equals the direct resume's, bit for bit.
    EXPECT_EQ(losses(path(c.name + ".jsonl")), losses(path("ref.jsonl")));
    const auto e = run(eval(ck));
    EXPECT_EQ(e.code, 0) << e.out;
    EXPECT_NE(e.out.find("using the previous checkpoint"), std::string::npos) << e.out;
    EXPECT_EQ(e.out.substr(e.out.find("val_loss")), ref_val.substr(ref_val.find("val_loss")));
  }
}

TEST_F(Fallback, SavingOverACorruptLatestKeepsTheGoodPrevious) {
  const std::string ck = fresh("s");
  std::string bytes = read(dir_ / ck / "model.safetensors");
  bytes[bytes.size() - 5] ^= 0x01;
  write(dir_ / ck / "model.safetensors", bytes);
  const std::string prev_model = read(dir_ / ck / ".." / "ck.prev" / "model.safetensors");
  const auto r = run(resume(ck) + " --save " + path(ck));
  ASSERT_EQ(r.code, 0) << r.out;
  // The corrupt step-4 checkpoint never becomes the fallback.
  EXPECT_EQ(step_of(dir_ / ck), 6);
  EXPECT_EQ(step_of(dir_ / "s" / "ck.prev"), 2);
  EXPECT_EQ(read(dir_ / "s" / "ck.prev" / "model.safetensors"), prev_model);
  // The next save keeps the good step-6 one.
  ASSERT_EQ(run(tiny("bf16-amp") + " --steps 7 --resume " + path(ck) + " --save " + path(ck)).code, 0);
  EXPECT_EQ(step_of(dir_ / "s" / "ck.prev"), 6);
}

TEST_F(Fallback, BothCorruptIsAnErrorNamingBoth) {
  const std::string ck = fresh("both");
  for (const char* d : {"ck", "ck.prev"}) {
    const fs::path model = dir_ / "both" / d / "model.safetensors";
    std::string bytes = read(model);
    bytes[bytes.size() - 5] ^= 0x01;
    write(model, bytes);
  }
  for (const std::string& cmd : {resume(ck), eval(ck)}) {
    const auto r = run(cmd);
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find(path(ck) + "/model.safetensors: CRC-32 does not match"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("the previous checkpoint '" + path(ck) + ".prev' is not usable either: " + path(ck) +
                         ".prev/model.safetensors: CRC-32 does not match"),
              std::string::npos)
        << r.out;
  }
}

TEST_F(Fallback, AUsersOwnPrevIsNeverUsedRemovedOrReplaced) {
  // A directory of the user's (even one holding a model file), a file, a link.
  ASSERT_EQ(run(tiny("bf16-amp") + " --steps 2 --save " + path("u/ck")).code, 0);
  fs::create_directories(dir_ / "u" / "ck.prev");
  write(dir_ / "u" / "ck.prev" / "notes.txt", "mine\n");
  fs::copy(dir_ / "ck" / "model.safetensors", dir_ / "u" / "ck.prev" / "model.safetensors");
  ASSERT_EQ(run(tiny("bf16-amp") + " --steps 3 --resume " + path("u/ck") + " --save " + path("u/ck")).code, 0);
  ASSERT_EQ(run(tiny("bf16-amp") + " --steps 4 --resume " + path("u/ck") + " --save " + path("u/ck")).code, 0);
  EXPECT_EQ(step_of(dir_ / "u" / "ck"), 4);
  EXPECT_EQ(read(dir_ / "u" / "ck.prev" / "notes.txt"), "mine\n");
  EXPECT_EQ(read(dir_ / "u" / "ck.prev" / "model.safetensors"), read(dir_ / "ck" / "model.safetensors"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "u" / "ck.prev"), fs::directory_iterator{}), 2);
  // With DIR corrupt, the user's directory is not a fallback.
  std::string bytes = read(dir_ / "u" / "ck" / "model.safetensors");
  bytes[bytes.size() - 5] ^= 0x01;
  write(dir_ / "u" / "ck" / "model.safetensors", bytes);
  const auto r = run(resume("u/ck"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("CRC-32 does not match"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("previous checkpoint"), std::string::npos) << r.out;

  // A file, and a link to a mantissa checkpoint: left as they are.
  ASSERT_EQ(run(tiny("bf16-amp") + " --steps 2 --save " + path("f/ck")).code, 0);
  write(dir_ / "f" / "ck.prev", "a file of mine\n");
  ASSERT_EQ(run(tiny("bf16-amp") + " --steps 3 --resume " + path("f/ck") + " --save " + path("f/ck")).code, 0);
  EXPECT_EQ(read(dir_ / "f" / "ck.prev"), "a file of mine\n");
  ASSERT_EQ(run(tiny("bf16-amp") + " --steps 2 --save " + path("l/ck")).code, 0);
  fs::create_directory_symlink(dir_ / "ref", dir_ / "l" / "ck.prev");
  const std::string ref_model = read(dir_ / "ref" / "model.safetensors");
  ASSERT_EQ(run(tiny("bf16-amp") + " --steps 3 --resume " + path("l/ck") + " --save " + path("l/ck")).code, 0);
  EXPECT_TRUE(fs::is_symlink(dir_ / "l" / "ck.prev"));
  EXPECT_EQ(read(dir_ / "ref" / "model.safetensors"), ref_model);
  EXPECT_EQ(step_of(dir_ / "ref"), 2);
}

}  // namespace
