"""Facts -> build: pure rules from a host's facts to what its build needs (arch lists, CUDA compatibility, host compiler, GPU stack, wheel tags, the sgl-kernel recipe)."""
