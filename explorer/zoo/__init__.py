"""The model zoo: manifests, the zoo folder, built-in models."""
