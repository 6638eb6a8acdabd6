# PYTHONPATH=tests/without_vllm pytest -m "not vllm": the fast suite as on a machine without vLLM or torch.
# Hide vLLM and torch as if they were not installed: find_spec answers None for them, so `import` fails with
# ModuleNotFoundError and availability checks (importlib.util.find_spec) say they are absent.
from importlib.machinery import PathFinder

_orig = PathFinder.find_spec
_HIDDEN = ("vllm", "torch", "torchvision", "torchaudio")


def _find_spec(cls, name, path=None, target=None):
    if name.split(".")[0] in _HIDDEN:
        return None
    return _orig(name, path, target)


PathFinder.find_spec = classmethod(_find_spec)
