# capplan::launch - starts capplan-train on a plan's layout (scaled down to this machine when
# asked), streams and records the run, and sets measured beside predicted (and simulated, when the
# simulator is built). Used by `capplan run` and the GUI's Run page. Links neither MPI nor Qt.
add_library(capplan_launch
  ${CMAKE_CURRENT_LIST_DIR}/src/launch_process.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/launch_machine.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/launch_scale.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/launch_command.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/launch_metrics.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/launch_record.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/launch_run.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/launch_slurm.cpp
)
add_library(capplan::launch ALIAS capplan_launch)
target_include_directories(capplan_launch PUBLIC ${CMAKE_CURRENT_LIST_DIR}/include)
target_link_libraries(capplan_launch PUBLIC capplan::planner Threads::Threads
  PRIVATE capplan::runtime_io capplan_warnings)
if(BLAS_FOUND AND CAPPLAN_CBLAS_INCLUDE_DIR)
  target_include_directories(capplan_launch PRIVATE ${CAPPLAN_CBLAS_INCLUDE_DIR})
  target_link_libraries(capplan_launch PRIVATE ${BLAS_LIBRARIES})
  target_compile_definitions(capplan_launch PRIVATE CAPPLAN_LAUNCH_HAVE_CBLAS=1)
endif()
if(TARGET capplan_simulator)
  target_link_libraries(capplan_launch PRIVATE capplan::simulator)
  target_compile_definitions(capplan_launch PRIVATE CAPPLAN_LAUNCH_HAVE_SIMULATOR=1)
endif()
if(MPIEXEC_EXECUTABLE)
  target_compile_definitions(capplan_launch PRIVATE CAPPLAN_MPIEXEC="${MPIEXEC_EXECUTABLE}")
endif()
