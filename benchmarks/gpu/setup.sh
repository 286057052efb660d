# Sourced by the device-session scripts (session 10 on): unbuffered output; Triton's cache and the C++
# host path's build under build/ (reused within one machine's life); this checkout installed; the host
# path built (prints the module, or None where it could not be).
export PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=$PWD/build/triton-cache TORCH_EXTENSIONS_DIR=$PWD/build/torch-ext
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
python3 -c "from moe_routing.kernels import host_launch; print(host_launch.load())"
