#include "mantissa/train/rank_agreement.hpp"

#include <cstdint>
#include <stdexcept>

#include "mantissa/io/files.hpp"

namespace mantissa::train {

void require_rank_agreement(dist::Group& group, const std::vector<std::pair<std::string, std::string>>& parts) {
  if (!group.distributed()) return;
  // Each rank sends [count, crc(names), crc(text 0), ...]: a count or name
  // list that differs means the ranks run different builds.
  const size_t n = parts.size() + 2;
  std::vector<uint32_t> mine(n), every(n * static_cast<size_t>(group.size()));
  mine[0] = static_cast<uint32_t>(parts.size());
  uint32_t names = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    names = io::crc32(parts[i].first.data(), parts[i].first.size() + 1, names);
    mine[i + 2] = io::crc32(parts[i].second.data(), parts[i].second.size());
  }
  mine[1] = names;
  const auto another_build = [](int r) {
    return std::invalid_argument("data-parallel ranks disagree on the settings themselves (rank " + std::to_string(r) +
                                 " runs another mantissa build than rank 0)");
  };
  // A first exchange of the count alone keeps the second one's sizes equal.
  std::vector<uint32_t> counts(static_cast<size_t>(group.size()));
  group.allgather(mine.data(), counts.data(), sizeof(uint32_t), "the start-up settings check");
  for (int r = 1; r < group.size(); ++r)
    if (counts[static_cast<size_t>(r)] != counts[0]) throw another_build(r);
  group.allgather(mine.data(), every.data(), n * sizeof(uint32_t), "the start-up settings check");
  for (int r = 1; r < group.size(); ++r) {
    const uint32_t* theirs = every.data() + static_cast<size_t>(r) * n;
    if (theirs[1] != every[1]) throw another_build(r);
    for (size_t i = 0; i < parts.size(); ++i)
      if (theirs[i + 2] != every[i + 2])
        throw std::invalid_argument("data-parallel ranks disagree on " + parts[i].first + " (rank " + std::to_string(r) +
                                    "'s differs from rank 0's): start every rank with the same settings");
  }
}

}  // namespace mantissa::train
