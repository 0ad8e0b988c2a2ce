"""Base utilities below the models: errors, images, sentences, paths, caches, compat."""
