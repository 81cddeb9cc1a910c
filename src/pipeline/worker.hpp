// The evaluation worker's main (`kharness __worker`): reads one request from stdin, verifies and
// times in this process, streams JSON lines to the parent (worker/channel.hpp). Returns the
// process exit code.
#pragma once

namespace kharness::pipeline {

int worker_main();

}  // namespace kharness::pipeline
