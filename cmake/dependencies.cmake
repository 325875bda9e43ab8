# Finds system dependencies (never fetched) and prints one line per optional one: found or not,
# and what that turns off. With CAPPLAN_REQUIRE_ALL (set by scripts/dev when CI is set) a missing
# optional dependency that a test suite needs is an error instead of a silently skipped suite.
find_package(Threads REQUIRED)

# capplan_missing(<what> <debian packages> <what is turned off>): one line, or a fatal error under
# CAPPLAN_REQUIRE_ALL.
function(capplan_missing what packages consequence)
  if(CAPPLAN_REQUIRE_ALL)
    message(FATAL_ERROR "capplan: ${what} not found (Debian: ${packages}) - required by "
                        "CAPPLAN_REQUIRE_ALL; run scripts/dev setup")
  endif()
  message(STATUS "capplan: ${what} not found (Debian: ${packages}) - ${consequence}")
endfunction()
find_package(yaml-cpp QUIET)
if(NOT yaml-cpp_FOUND)
  message(FATAL_ERROR "capplan: yaml-cpp not found (Debian: libyaml-cpp-dev); run scripts/dev setup")
endif()
if(TARGET yaml-cpp::yaml-cpp)
  set(CAPPLAN_YAML_TARGET yaml-cpp::yaml-cpp)
else()
  set(CAPPLAN_YAML_TARGET yaml-cpp)
endif()

# The one JSON library, for reading and writing (Debian: nlohmann-json3-dev, header-only).
find_package(nlohmann_json 3 QUIET)
if(NOT nlohmann_json_FOUND)
  message(FATAL_ERROR "capplan: nlohmann-json not found (Debian: nlohmann-json3-dev); run scripts/dev setup")
endif()

find_package(MPI COMPONENTS C CXX)
if(MPI_FOUND)
  message(STATUS "capplan: MPI found (${MPI_CXX_LIBRARIES}) - capplan-train and the mpi tests are built")
else()
  capplan_missing("MPI" "libopenmpi-dev openmpi-bin" "capplan-train and the mpi tests are OFF")
endif()

set(BLA_VENDOR OpenBLAS)
find_package(BLAS)
find_path(CAPPLAN_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas openblas-openmp openblas-pthread)
if(BLAS_FOUND AND CAPPLAN_CBLAS_INCLUDE_DIR)
  message(STATUS "capplan: OpenBLAS found (${BLAS_LIBRARIES}) - CPU GEMMs use cblas")
else()
  capplan_missing("OpenBLAS" "libopenblas-dev" "the CPU backend uses its own GEMM loops (slow)")
endif()

# capplan-train has one backend, the CPU's; there is no GPU backend to look for or build.
message(STATUS "capplan: capplan-train backend: CPU")

# CAPPLAN_GUI_STATUS (in the cache) says why capplan-gui is or is not built; scripts/dev run
# prints it when there is no capplan-gui to start.
if(CAPPLAN_BUILD_GUI)
  find_package(Qt6 COMPONENTS Widgets Charts Concurrent Test QUIET)
  if(Qt6_FOUND)
    message(STATUS "capplan: Qt ${Qt6_VERSION} found - capplan-gui and the gui tests are built")
    set(CAPPLAN_GUI_STATUS "built (Qt ${Qt6_VERSION})" CACHE INTERNAL "")
  else()
    # Which component failed, and the Debian package that holds its CMake config. Qt6Charts
    # needs Qt6OpenGL's config, which only libqt6opengl6-dev ships.
    set(missing "")
    set(pkgs "")
    foreach(pair Core:qt6-base-dev Widgets:qt6-base-dev Concurrent:qt6-base-dev Test:qt6-base-dev
                 OpenGL:libqt6opengl6-dev Charts:qt6-charts-dev)
      string(REPLACE ":" ";" pair "${pair}")
      list(GET pair 0 comp)
      list(GET pair 1 pkg)
      if(NOT Qt6${comp}_FOUND AND NOT TARGET Qt6::${comp})
        list(APPEND missing Qt6${comp})
        list(APPEND pkgs ${pkg})
      endif()
    endforeach()
    list(REMOVE_DUPLICATES pkgs)
    string(REPLACE ";" " " missing "${missing}")
    string(REPLACE ";" " " pkgs "${pkgs}")
    if(pkgs STREQUAL "")
      set(pkgs "qt6-base-dev qt6-charts-dev libqt6opengl6-dev")
    endif()
    set(CAPPLAN_GUI_STATUS "not built: ${missing} not found (install: apt-get install ${pkgs})"
        CACHE INTERNAL "")
    capplan_missing("Qt 6 (${missing})" "${pkgs}" "capplan-gui and the gui tests are OFF")
    set(CAPPLAN_BUILD_GUI OFF)
  endif()
else()
  set(CAPPLAN_GUI_STATUS "not built: CAPPLAN_BUILD_GUI is OFF" CACHE INTERNAL "")
endif()

if(CAPPLAN_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    message(FATAL_ERROR "capplan: GoogleTest not found (Debian: libgtest-dev libgmock-dev); "
                        "run scripts/dev setup or configure with -DCAPPLAN_BUILD_TESTS=OFF")
  endif()
  include(GoogleTest)
endif()
if(CAPPLAN_BUILD_BENCH)
  find_package(benchmark QUIET)
  if(benchmark_FOUND)
    message(STATUS "capplan: Google Benchmark found - tests/bench is built")
  else()
    capplan_missing("Google Benchmark" "libbenchmark-dev" "tests/bench is OFF")
    set(CAPPLAN_BUILD_BENCH OFF)
  endif()
endif()
