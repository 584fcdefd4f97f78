"""Vision-language models (mlx-vlm): loading, image inputs, and the image-aware prompt that keys
the block cache by image content. See docs/vision.md."""
