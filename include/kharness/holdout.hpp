// Held-out shapes (`--holdout N`): workloads a submitter never sees, drawn per definition from its
// var axes within the range the shipped workloads span and under its constraints, from a seed
// the submitter cannot see (KHARNESS_HOLDOUT_SEED; a random one when unset). A kernel that
// special-cases the shipped shapes fails on them. The verdict records the seed only as a hash.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kharness/operators.hpp"

namespace kharness {

struct HoldoutDraw {
  std::vector<Workload> workloads;  // uuids "holdout-<k>-<8 hex>", k from 1
  // Why fewer than asked (or none) were drawn, or what was not checked; one line each.
  std::vector<std::string> notes;
};

// Deterministic in (operator, n, seed). Each var axis is drawn log-uniformly (uniformly where the
// range includes 0 or less) between the smallest and largest value the shipped workloads give it;
// a constraint `axis == expr` over axes derives that axis instead; every constraint that is an
// expression over axes (Python's // read as /) must hold; constraints over tensors or values
// (x.shape[0], t[-1].item()) are left to the input generators and named in a note. A drawn shape
// never equals a shipped one nor another drawn one. Inputs follow a shipped workload's (random
// stays random, scalars keep their value); a definition whose workloads read files (safetensors)
// or that has no var axis gets no held-out workload, and a note says why.
HoldoutDraw draw_holdout(const Operator& op, int n, std::uint64_t seed);

// What a verdict records of the seed: "sha256:" and the first 16 hex digits of its hash.
std::string holdout_seed_hash(std::uint64_t seed);

struct HoldoutSeed {
  std::uint64_t value = 0;
  bool from_environment = false;  // false: drawn at random for this process
};
// KHARNESS_HOLDOUT_SEED (decimal or 0x-hex); unset or empty: a random seed. A malformed value is
// an input error naming the variable.
HoldoutSeed holdout_seed_from_environment();

}  // namespace kharness
