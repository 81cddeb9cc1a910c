// `score --shard I/N` (docs/archive.md#merge): the I-th of N deterministic slices of the sorted
// submissions, so N processes (a Slurm job array, a Kubernetes Indexed Job) score a folder between
// them and `kharness archive merge` joins their archives.
//
// I is 0-based, 0 <= I < N: what SLURM_ARRAY_TASK_ID is under `sbatch --array=0-(N-1)` and
// JOB_COMPLETION_INDEX is in a Kubernetes Indexed Job. Submission k of the sorted list (0-based)
// belongs to shard k mod N: round robin, so a folder whose slow submissions sort together (one
// author's variants) still spreads them over the shards. Every submission is in exactly one shard
// for a given N; a shard may be empty when N exceeds the number of submissions.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace kharness::cli {

struct Shard {
  std::size_t index = 0;
  std::size_t count = 1;
  std::string text() const { return std::to_string(index) + "/" + std::to_string(count); }
};

// "I/N" with decimal I and N, 1 <= N <= 100000 and 0 <= I < N; else input_error naming --shard.
Shard parse_shard(const std::string& text);

// The positions (ascending) of the items of `total` sorted items that belong to `shard`.
std::vector<std::size_t> shard_items(std::size_t total, const Shard& shard);

}  // namespace kharness::cli
