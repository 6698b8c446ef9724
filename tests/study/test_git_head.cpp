// The report's git revision is read from .git without running git: the
// checkout the tests were built from must give what `git rev-parse HEAD`
// (run here by the test, as the reference) says; crafted .git folders give
// their ref or nothing, and nothing their config names is run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "mantissa/study/experiment.hpp"
#include "train/cli_util.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using mantissa::study::git_head;

namespace {

const std::string kHash = "0123456789abcdef0123456789abcdef01234567";

}  // namespace

TEST(GitHead, MatchesGitRevParseOnThisCheckout) {
  const auto r = cli_test::run_command("git -C '" MANTISSA_SOURCE_DIR "' rev-parse HEAD");
  if (r.code != 0) GTEST_SKIP() << "not a git checkout (or no git): " << r.out;
  const std::string want = r.out.substr(0, 40);
  EXPECT_EQ(git_head(MANTISSA_SOURCE_DIR).substr(0, 40), want);
}

TEST(GitHead, ReadsRefsPackedRefsAndDetachedHeadsAndRunsNothing) {
  TempDir d("git");
  const std::string pwned = (d.path / "PWNED").string();
  d.write(".git/config", "[core]\n\tfsmonitor = touch " + pwned + "\n\thooksPath = /tmp\n");
  d.write(".git/HEAD", "ref: refs/heads/main\n");
  d.write(".git/refs/heads/main", kHash + "\n");
  EXPECT_EQ(git_head(d.path.string()), kHash + " (main)");
  fs::remove(d.path / ".git/refs/heads/main");
  d.write(".git/packed-refs", "# pack-refs with: peeled\n" + std::string(40, 'f') + " refs/heads/other\n" + kHash +
                                  " refs/heads/main\n");
  EXPECT_EQ(git_head(d.path.string()), kHash + " (main)");
  d.write(".git/HEAD", kHash + "\n");
  EXPECT_EQ(git_head(d.path.string()), kHash);
  for (const char* bad : {"ref: refs/heads/../../../etc/passwd\n", "ref: /etc/passwd\n", "not a ref\n", "0123\n"}) {
    d.write(".git/HEAD", bad);
    EXPECT_EQ(git_head(d.path.string()), "") << bad;
  }
  EXPECT_EQ(git_head((d.path / "missing").string()), "");
  EXPECT_FALSE(fs::exists(pwned));
}
