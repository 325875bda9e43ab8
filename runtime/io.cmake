# The runtime's I/O half: data shards and DataSource, checkpoints, metrics, report.
# runtime/CMakeLists.txt includes this file and adds the sources to the runtime library.
set(CAPPLAN_RUNTIME_IO_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/src/data.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/checkpoint.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/metrics.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/report.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/json_lite.cpp
)
