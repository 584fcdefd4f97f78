# MLX binds its BLAS when mlx.core is first imported, so the fast CPU BLAS is loaded here, before
# anything in the package can import mlx. Keep this file import-light.
from inference.platform import preload_fast_blas

preload_fast_blas()
