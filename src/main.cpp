#include "cli/cli.hpp"

int main(int argc, char** argv) { return kharness::cli::run(argc, argv); }
