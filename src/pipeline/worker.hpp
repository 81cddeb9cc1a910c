// The GPU worker's main (`kharness __worker`): reads one request from stdin and runs it in this
// process, an evaluation (verify, then time), a profile or a model-check (the request's "task"),
// streaming JSON lines to the parent (worker/channel.hpp). Returns the process exit code.
#pragma once

namespace kharness::pipeline {

int worker_main();

}  // namespace kharness::pipeline
