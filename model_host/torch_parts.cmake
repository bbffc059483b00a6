# The LibTorch parts of model_host/: included from model_host/CMakeLists.txt.
#
#   es_torch_runtime (ensemble::torch_runtime)  model zoo + ModelRunner
#   ensemble-make-demo                          writes the demo repository
#
# Kept in their own file so that the router-side targets of model_host/
# (launcher, no LibTorch) stay buildable where LibTorch is absent.
find_package(Torch REQUIRED)
find_package(CLI11 CONFIG QUIET)  # header-only; /usr/include is enough without it

get_filename_component(_es_torch_parts_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

add_library(es_torch_runtime STATIC
  ${CMAKE_CURRENT_LIST_DIR}/blas_kernels.cc
  ${CMAKE_CURRENT_LIST_DIR}/model_runner.cc
  ${CMAKE_CURRENT_LIST_DIR}/model_zoo.cc
  ${CMAKE_CURRENT_LIST_DIR}/served_config.cc
  ${CMAKE_CURRENT_LIST_DIR}/torch_convert.cc)
add_library(ensemble::torch_runtime ALIAS es_torch_runtime)
target_include_directories(es_torch_runtime PUBLIC ${_es_torch_parts_root})
target_link_libraries(es_torch_runtime PUBLIC ${TORCH_LIBRARIES} ensemble::common ${CMAKE_DL_LIBS})
es_set_warnings(es_torch_runtime)

add_executable(ensemble-make-demo ${CMAKE_CURRENT_LIST_DIR}/make_demo_main.cc ${CMAKE_CURRENT_LIST_DIR}/demo_training.cc)
# Fashion-MNIST (es_training_data): the demo's members get a few hundred training steps.
target_link_libraries(ensemble-make-demo PRIVATE ensemble::torch_runtime ensemble::training_data)
es_link_cli11(ensemble-make-demo)
es_set_warnings(ensemble-make-demo)
