// The `formats` and `quantize` subcommands, run as a user would: the real
// binary with stdin from a file, stdout and stderr captured, exit code checked.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CliRun run_cli(const std::string& args, const std::string& stdin_text = "") {
  char dir_template[] = "/tmp/mantissa_cli_test_XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) return {};
  const std::string d = dir, in = d + "/in", out = d + "/out", err = d + "/err";
  std::ofstream(in, std::ios::binary) << stdin_text;
  const std::string cmd = std::string("\"") + MANTISSA_CLI + "\" " + args + " <" + in + " >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  CliRun r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  std::remove(in.c_str());
  std::remove(out.c_str());
  std::remove(err.c_str());
  rmdir(dir);
  return r;
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

}  // namespace

TEST(CliFormats, JsonHasEveryPresetWithBriefValues) {
  const CliRun r = run_cli("formats --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 16u);
  for (const auto& f : j) {
    for (const char* key : {"name", "exponent_bits", "mantissa_bits", "bias", "max_exponent", "min_exponent", "max",
                            "min_normal", "min_subnormal", "has_inf", "nan", "negative_zero"})
      EXPECT_TRUE(f.contains(key)) << f.value("name", "?") << " lacks " << key;
  }
  auto find = [&](const std::string& name) {
    for (const auto& f : j)
      if (f["name"] == name) return f;
    ADD_FAILURE() << name << " missing";
    return nlohmann::json::object();
  };
  const auto e4 = find("e4m3fn");
  EXPECT_EQ(e4["max"].get<double>(), 448);
  EXPECT_EQ(e4["max_exponent"], 8);
  EXPECT_EQ(e4["min_exponent"], -6);
  EXPECT_EQ(e4["min_subnormal"].get<double>(), std::ldexp(1, -9));
  EXPECT_EQ(e4["nan"], "fn");
  EXPECT_EQ(e4["has_inf"], false);
  const auto fz = find("e5m2fnuz");
  EXPECT_EQ(fz["bias"], 16);
  EXPECT_EQ(fz["min_exponent"], -15);
  EXPECT_EQ(fz["nan"], "fnuz");
  EXPECT_EQ(fz["negative_zero"], false);
  const auto bf = find("bf16");
  EXPECT_EQ(bf["max"].get<double>(), (2 - std::ldexp(1, -7)) * std::ldexp(1, 127));
  EXPECT_EQ(bf["min_subnormal"].get<double>(), std::ldexp(1, -133));
  EXPECT_EQ(find("fp16")["max"].get<double>(), 65504);
  EXPECT_EQ(find("e3m4")["max"].get<double>(), 15.5);
  EXPECT_EQ(find("e4m3")["max"].get<double>(), 240);
  EXPECT_EQ(find("e4m3b11fnuz")["max"].get<double>(), 30);
  EXPECT_EQ(find("e2m1fn")["nan"], "none");
  EXPECT_TRUE(find("e8m0")["min_subnormal"].is_null());
  EXPECT_EQ(find("e8m0")["min_normal"].get<double>(), std::ldexp(1, -127));
}

TEST(CliFormats, TableListsEveryPresetAndUserFormats) {
  const CliRun r = run_cli("formats");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* name : {"fp32", "tf32", "bf16", "fp16", "e5m2fnuz", "e4m3fnuz", "e4m3b11fnuz", "e3m4", "e8m0",
                           "e2m3fn", "e3m2fn", "e2m1fn", "int8"})
    EXPECT_TRUE(contains(r.out, name)) << name;
  EXPECT_TRUE(contains(r.out, "448"));
  EXPECT_TRUE(contains(r.out, "57344"));
  const CliRun u = run_cli("formats --json --format e3m3:bias=4:nan=none --format e4m3fn");
  ASSERT_EQ(u.exit_code, 0) << u.err;
  const auto j = nlohmann::json::parse(u.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["max"].get<double>(), 15);
  EXPECT_EQ(j[0]["min_normal"].get<double>(), 0.125);
  const CliRun bad = run_cli("formats --format e3m3:bias=q");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(contains(bad.err, "bias")) << bad.err;
}

TEST(CliFormats, QuantizePrintsCodeAndDecodedValue) {
  const CliRun r = run_cli("quantize --format e4m3fn", "1.0\n464\n465\nnan\n-0\n0x1.8p+3\ninf\n-inf\n 0.001953125 \n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "0x38 0x1p+0\n0x7e 0x1.cp+8\n0x7f nan\n0x7f nan\n0x80 -0x0p+0\n0x54 0x1.8p+3\n0x7f nan\n0xff nan\n"
            "0x01 0x1p-9\n");
  const CliRun sat = run_cli("quantize --format e4m3fn --saturate", "465\n-1e9\n");
  EXPECT_EQ(sat.out, "0x7e 0x1.cp+8\n0xfe -0x1.cp+8\n");
  const CliRun fp16 = run_cli("quantize --format fp16", "1\n65520\n-2.5\n");
  EXPECT_EQ(fp16.out, "0x3c00 0x1p+0\n0x7c00 inf\n0xc100 -0x1.4p+1\n");
  const CliRun up = run_cli("quantize --format e4m3fn --round up", "1.01\n-1.01\n");
  EXPECT_EQ(up.out, "0x39 0x1.2p+0\n0xb8 -0x1p+0\n");
  const CliRun e5 = run_cli("quantize -f e5m2", "1e6\n");
  EXPECT_EQ(e5.out, "0x7c inf\n");
  const CliRun tf = run_cli("quantize --format tf32", "1.5\n");
  EXPECT_EQ(tf.out, "0x3fc00000 0x1.8p+0\n");
  const CliRun user = run_cli("quantize --format e3m3:bias=4:nan=none", "100\n0.1\n");
  EXPECT_EQ(user.out, "0x3f 0x1.ep+3\n0x06 0x1.8p-4\n");  // 0.1 -> subnormal 6 * 2^-6 = 0.09375
}

TEST(CliFormats, StochasticIsSeededAndReproducible) {
  std::string in;
  for (int i = 0; i < 200; ++i) in += "1.0625\n";  // halfway between two e4m3fn values 1 and 1.125
  const CliRun a = run_cli("quantize --format e4m3fn --round stochastic --seed 42", in);
  const CliRun b = run_cli("quantize --format e4m3fn --round stochastic --seed 42", in);
  const CliRun c = run_cli("quantize --format e4m3fn --round stochastic --seed 43", in);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
  size_t ups = 0, pos = 0;
  while ((pos = a.out.find("0x39", pos)) != std::string::npos) ++ups, ++pos;
  EXPECT_GT(ups, 60u);  // p = 1/2: 100 +- 7 expected
  EXPECT_LT(ups, 140u);
}

TEST(CliFormats, BadInputExitsTwoWithMessageAndNoPartialOutput) {
  const CliRun fmt = run_cli("quantize --format e9m9x", "1\n");
  EXPECT_EQ(fmt.exit_code, 2);
  EXPECT_TRUE(contains(fmt.err, "e9m9x")) << fmt.err;
  EXPECT_TRUE(contains(fmt.err, "e4m3fnuz")) << fmt.err;  // lists the valid ones
  EXPECT_EQ(fmt.out, "");
  const CliRun line = run_cli("quantize --format bf16", "1\n2\nabc\n4\n");
  EXPECT_EQ(line.exit_code, 2);
  EXPECT_TRUE(contains(line.err, "line 3")) << line.err;
  EXPECT_TRUE(contains(line.err, "abc")) << line.err;
  EXPECT_EQ(line.out, "");
  const CliRun junk = run_cli("quantize --format bf16", "1.5x\n");
  EXPECT_EQ(junk.exit_code, 2);
  EXPECT_TRUE(contains(junk.err, "line 1")) << junk.err;
  const CliRun empty = run_cli("quantize --format bf16", "1\n\n");
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_TRUE(contains(empty.err, "line 2")) << empty.err;
  const CliRun range = run_cli("quantize --format bf16", "1e999\n");
  EXPECT_EQ(range.exit_code, 2);
  const CliRun mode = run_cli("quantize --format bf16 --round sideways", "1\n");
  EXPECT_EQ(mode.exit_code, 2);
  EXPECT_TRUE(contains(mode.err, "nearest-away")) << mode.err;
  const CliRun missing = run_cli("quantize", "1\n");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(contains(missing.err, "--format")) << missing.err;
  const CliRun bits = run_cli("quantize --format bf16 --round stochastic --random-bits 40", "1\n");
  EXPECT_EQ(bits.exit_code, 2);
  EXPECT_TRUE(contains(bits.err, "random-bits")) << bits.err;
}
