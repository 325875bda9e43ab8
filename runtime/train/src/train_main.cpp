// capplan-train: `capplan-train [flags]` trains (under mpirun); `capplan-train data prepare ...`
// writes token shards, `capplan-train report FILE` summarises a metrics file and
// `capplan-train health` checks the nodes before a job trains.
#include <cstdio>
#include <cstring>

#include "io/data.h"
#include "train/health.h"
#include "train/measure.h"
#include "io/report.h"
#include "train/communicator.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  capplan::rt::mpi_prefer_yielding_waits();  // before any MPI_Init (communicator.h)
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::fputs(capplan::rt::train_usage().c_str(), stdout);
    return 0;
  }
  if (argc >= 3 && std::strcmp(argv[1], "data") == 0 && std::strcmp(argv[2], "prepare") == 0)
    return capplan::rt::data_prepare_main(argc - 2, argv + 2);
  if (argc >= 2 && std::strcmp(argv[1], "health") == 0)
    return capplan::rt::health_main(argc - 1, argv + 1);
  if (argc >= 2 && std::strcmp(argv[1], "measure") == 0)
    return capplan::rt::measure_main(argc - 1, argv + 1);
  if (argc >= 2 && std::strcmp(argv[1], "report") == 0)
    return capplan::rt::report_main(argc - 1, argv + 1);
  return capplan::rt::train_main(argc, argv);
}
