# The runtime's I/O half: data shards and DataSource, checkpoints, metrics, report.
# Built as its own small library (no MPI, no BLAS) that capplan_runtime links, so its tests build
# and run on their own.
set(CAPPLAN_RUNTIME_IO_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/src/atomic_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/json_lite.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/data.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/checkpoint.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/metrics.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/report.cpp
)
add_library(capplan_runtime_io STATIC ${CAPPLAN_RUNTIME_IO_SOURCES})
add_library(capplan::runtime_io ALIAS capplan_runtime_io)
target_include_directories(capplan_runtime_io PUBLIC ${CMAKE_CURRENT_LIST_DIR}/include)
target_link_libraries(capplan_runtime_io
  PUBLIC capplan::planner Threads::Threads
  PRIVATE capplan_warnings)
target_compile_options(capplan_runtime_io PRIVATE -O2)
