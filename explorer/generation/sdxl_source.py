"""Finding and loading Stable Diffusion XL from local files; nothing is ever fetched.

SDXL base comes as a diffusers folder (``model_index.json`` with ``unet/``, ``vae/``,
``text_encoder/``, ``text_encoder_2/``, ``tokenizer/``, ``tokenizer_2/``, ``scheduler/``) or as
one ``.safetensors`` file (the original release), which diffusers can only read together with
the folder's configs. ``check_source`` says precisely what is missing before anything heavy is
loaded; ``SdxlCache`` keeps the one pipeline in use, so requests after the first reuse it.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import torch

from explorer.core.errors import ExplorerError
from explorer.core.files import read_json
from explorer.core.paths import SDXL_ENV
from explorer.core.runtime import prepare_libraries

WEIGHT_FILES = ("*.safetensors", "*.bin")
# component -> whether it holds weights (configs alone for tokenizers and the scheduler)
COMPONENTS = {"unet": True, "vae": True, "text_encoder_2": True, "tokenizer_2": False, "scheduler": False,
              "text_encoder": True, "tokenizer": False}
HOW_TO_POINT = (f"point to SDXL base with --sdxl DIR (the CLI), the SDXL field (the Generation tab) or ${SDXL_ENV}: "
                f"a local diffusers folder of stable-diffusion-xl-base-1.0, or its single .safetensors file "
                f"with --sdxl-config DIR (the folder's configs); nothing is downloaded")


class SdxlError(ExplorerError):
    """SDXL cannot be found, loaded, or fed what was asked."""


@dataclass(frozen=True)
class SdxlOptions:
    """How the pipeline runs. fp16 and offloading are GPU options; on CPU fp32 is used and said."""

    device: str = "auto"
    precision: str = "fp16"
    cpu_offload: bool = False  # model CPU offload (accelerate): each component on the GPU only while it runs
    attention_slicing: bool = False
    vae_tiling: bool = False

    def resolved_device(self) -> torch.device:
        import torch  # on first use: the page reads these options before torch is imported

        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    def dtype(self) -> torch.dtype:
        import torch

        on_gpu = self.resolved_device().type == "cuda"
        return torch.float16 if self.precision == "fp16" and on_gpu else torch.float32

    def notes(self) -> list[str]:
        notes = []
        if self.resolved_device().type == "cpu":
            if self.precision == "fp16":
                notes.append("fp16 asked for on CPU: using fp32")
            if self.cpu_offload:
                notes.append("CPU offload needs a GPU: ignored")
        return notes


@dataclass(frozen=True)
class SdxlSource:
    path: Path  # the folder, or the single file
    config: Path | None  # the folder of configs a single file is read with
    components: tuple[str, ...]  # what the folder holds

    @property
    def single_file(self) -> bool:
        return self.path.is_file()

    @property
    def has_stock_encoders(self) -> bool:
        return self.single_file or {"text_encoder", "tokenizer"} <= set(self.components)


def check_source(path: str | Path | None, config: str | Path | None = None) -> SdxlSource:
    """What is at ``path``, or an ``SdxlError`` that names what is missing and how to point to SDXL."""
    if path is None or not str(path).strip():
        raise SdxlError(f"No SDXL weights given: {HOW_TO_POINT}.")
    path = Path(str(path).strip()).expanduser()
    if not path.exists():
        raise SdxlError(f"SDXL not found at {path}: {HOW_TO_POINT}.")
    if path.is_file():
        if path.suffix != ".safetensors":
            raise SdxlError(f"{path} is not a .safetensors file or a diffusers folder: {HOW_TO_POINT}.")
        if config is None:
            raise SdxlError(f"{path} is a single SDXL file: diffusers needs the configs of SDXL base to read it "
                            f"(model_index.json and each component's config.json, no weights); pass them with "
                            f"--sdxl-config DIR. Nothing is downloaded.")
        config_source = check_source(config)
        return SdxlSource(path=path, config=config_source.path, components=config_source.components)
    index = path / "model_index.json"
    if not index.is_file():
        raise SdxlError(f"{path} is not a diffusers folder (no model_index.json): {HOW_TO_POINT}.")
    listed = read_json(index, SdxlError, where=str(path))
    if "StableDiffusionXL" not in str(listed.get("_class_name", "")):
        raise SdxlError(f"{path} holds a {listed.get('_class_name', 'pipeline of unknown class')}, not SDXL base "
                        f"(StableDiffusionXLPipeline).")
    problems, present = [], []
    for name, has_weights in COMPONENTS.items():
        folder = path / name
        if not folder.is_dir():
            if name in ("text_encoder", "tokenizer"):
                continue  # the swapped pipeline does without; stock needs them (said when asked for)
            problems.append(f"{name}/ is missing")
        elif has_weights and not any(any(folder.glob(pattern)) for pattern in WEIGHT_FILES):
            problems.append(f"{name}/ has no weights (.safetensors or .bin)")
        else:
            present.append(name)
    if problems:
        raise SdxlError(f"{path} is not a complete SDXL folder: {'; '.join(problems)}.")
    return SdxlSource(path=path, config=None, components=tuple(present))


def check_refiner(path: str | Path) -> Path:
    """The refiner's diffusers folder (stable-diffusion-xl-refiner-1.0), or an ``SdxlError`` saying what is wrong.
    Its bigG and VAE are taken from the base pipeline, as Long-CLIP's SDXL code and diffusers' docs do."""
    path = Path(str(path).strip()).expanduser()
    if not (path / "model_index.json").is_file():
        raise SdxlError(f"refiner not found at {path}: give the diffusers folder of stable-diffusion-xl-refiner-1.0 "
                        f"(model_index.json, unet/, scheduler/); nothing is downloaded.")
    listed = read_json(path / "model_index.json", SdxlError, where=str(path))
    if "Img2Img" not in str(listed.get("_class_name", "")):
        raise SdxlError(f"{path} holds a {listed.get('_class_name')}, not the SDXL refiner "
                        f"(StableDiffusionXLImg2ImgPipeline).")
    unet = path / "unet"
    if not unet.is_dir() or not any(any(unet.glob(pattern)) for pattern in WEIGHT_FILES):
        raise SdxlError(f"{path}: unet/ is missing or has no weights.")
    return path


def load_refiner(path: Path, base, options: SdxlOptions):
    prepare_libraries()  # transformers' image code imports torchvision
    from diffusers import StableDiffusionXLImg2ImgPipeline

    try:
        refiner = StableDiffusionXLImg2ImgPipeline.from_pretrained(
            str(path), text_encoder_2=base.text_encoder_2, vae=base.vae, dtype=options.dtype(), local_files_only=True)
    except Exception as error:  # noqa: BLE001
        raise SdxlError(f"SDXL refiner at {path} could not be loaded: {' '.join(str(error).split())[:500]}") \
            from error
    refiner.set_progress_bar_config(disable=True)
    device = options.resolved_device()
    if options.cpu_offload and device.type == "cuda":
        refiner.enable_model_cpu_offload(device=device)
    else:
        refiner.to(device)
    return refiner


def load_pipeline(source: SdxlSource, options: SdxlOptions):
    """The stock ``StableDiffusionXLPipeline``, with the GPU options applied."""
    prepare_libraries()  # transformers' image code imports torchvision
    from diffusers import StableDiffusionXLPipeline

    quiet_libraries()
    dtype = options.dtype()
    try:
        if source.single_file:
            pipe = StableDiffusionXLPipeline.from_single_file(
                str(source.path), config=str(source.config), dtype=dtype, local_files_only=True)
        else:
            pipe = StableDiffusionXLPipeline.from_pretrained(str(source.path), dtype=dtype, local_files_only=True)
    except Exception as error:  # diffusers' own errors name the component; say which folder it was
        raise SdxlError(f"SDXL at {source.path} could not be loaded: {' '.join(str(error).split())[:500]}") \
            from error
    pipe.set_progress_bar_config(disable=True)  # progress is reported per step by the caller
    device = options.resolved_device()
    if options.cpu_offload and device.type == "cuda":
        try:
            pipe.enable_model_cpu_offload(device=device)
        except ImportError as error:
            raise SdxlError(f"model CPU offload needs accelerate: pip install accelerate ({error})") from error
    else:
        pipe.to(device)
    if options.attention_slicing:
        pipe.enable_attention_slicing()
    if options.vae_tiling:
        pipe.vae.enable_tiling()
    return pipe


def quiet_libraries() -> None:
    """diffusers' and transformers' load bars and truncation warnings off: the page and the CLI say
    what matters themselves (the stock cut is marked in the prompt, progress is per step)."""
    prepare_libraries()  # transformers' image code imports torchvision
    import diffusers
    import transformers

    diffusers.utils.logging.set_verbosity_error()
    diffusers.utils.logging.disable_progress_bar()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


class SdxlCache:
    """The one SDXL pipeline in use (SDXL base is about 7 GB in fp16: never two at once)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._key: tuple | None = None
        self._pipe = None
        self._refiner_key: tuple | None = None
        self._refiner = None

    def get(self, source: SdxlSource, options: SdxlOptions, before_load: Callable[[], None] | None = None):
        """The pipeline for ``source``; ``before_load`` runs first when another one must be loaded (to drop
        what holds the old one's weights), so that two pipelines are never in memory at once."""
        key = (str(source.path), _stamp(source.path), str(source.config), tuple(asdict(options).items()))
        with self._lock:
            if key != self._key:
                self._pipe, self._key = None, None  # let the old one go before loading the next
                self._refiner, self._refiner_key = None, None  # it shares the old one's bigG and VAE
                if before_load:
                    before_load()
                self._pipe = load_pipeline(source, options)
                self._key = key
            return self._pipe

    def refiner(self, path: str | Path, base, options: SdxlOptions):
        """The refiner for ``base`` (sharing its bigG and VAE), kept like the base pipeline."""
        folder = check_refiner(path)
        key = (str(folder), _stamp(folder), id(base), tuple(asdict(options).items()))
        with self._lock:
            if key != self._refiner_key:
                self._refiner, self._refiner_key = None, None
                self._refiner = load_refiner(folder, base, options)
                self._refiner_key = key
            return self._refiner

    def clear(self) -> None:
        with self._lock:
            self._pipe, self._key = None, None
            self._refiner, self._refiner_key = None, None


def _stamp(path: Path) -> float:
    target = path if path.is_file() else path / "model_index.json"
    return target.stat().st_mtime
