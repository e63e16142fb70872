"""Decoding on the GPU: W3 and W3L (photos twice W3's size) decoded and augmented by
``stoker.torch.loader(decode_on="cuda")`` (nvJPEG through torchvision's batched
``decode_jpeg``, crop / resize / flip / jitter / normalise in torch) against stoker's CPU path
(``decode_on=None``) on the same machine's cores, and the mixed mode (``cpu_share``).

    python bench/gpu_decode.py --out gpu_decode.json --markdown BENCHMARKS.md

Three measurements, one process, one contender after the other:

- ``profile``: where a ``decode_on="cuda"`` batch's time goes (the engine alone; the device
  half, and its decode).
- ``decoders``: the JPEG decoders alone on the device, a batch of W3 files at a time:
  torchvision's ``decode_jpeg(device="cuda")`` and nvImageCodec's ``Decoder.decode`` (where its
  package is importable), images/s (the library choice).
- ``feed``: the loader alone, batches of 256 to the device, no model: images/s and the
  process's CPU seconds per 1,000 images.
- ``train``: ResNet-18 (bf16 autocast, channels-last, SGD) fed by each: images/s and input
  stall (``stoker.timed``, CUDA synchronise at each step end).

NVIDIA DALI is reported as absent when it cannot be imported. ``--markdown FILE`` replaces the
file's "Decoding on the GPU" section with the table (``render``; ``bench/run.py`` renders it too,
from ``bench/results/gpu_decode.json``, whose ``notes`` hold what was read off the run).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
import sys
import time
from multiprocessing import Pool
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from gpu_train import train  # noqa: E402


def _write(job: tuple[str, int, int, int]) -> list[str]:
    import stoker.datasets

    root, n, seed, scale = job
    return stoker.datasets.write_image_folder(root, n=n, num_classes=10, seed=seed, size_scale=scale)


def write_data(root: str, n: int, scale: int, copies: int) -> None:
    """``n`` JPEGs (W3's generator, ``size_scale``) written by all cores, each hard-linked
    ``copies - 1`` more times (longer epochs of the same data)."""
    if Path(root).exists():
        return
    t = time.perf_counter()
    parts = os.cpu_count() or 1
    jobs = [(f"{root}.parts/{i:02d}", n // parts, 100 + i, scale) for i in range(parts)]
    with Pool(parts) as pool:
        written = [f for fs in pool.map(_write, jobs) for f in fs]
    files = []
    for f in written:  # one ImageFolder: root/classNN/<part>-NNNNN.jpg
        part, cls, name = Path(f).parts[-3:]
        dst = Path(root) / cls / f"{part}-{name}"
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.rename(f, dst)
        files.append(str(dst))
    for f in files:
        for c in range(1, copies):
            os.link(f, f"{f[:-4]}-{c}.jpg")
    print(f"data {root}: {len(files)} JPEGs x{copies} in {time.perf_counter() - t:.0f} s", flush=True)


def pipeline(root: str, threads: int, batch: int) -> Any:
    import stoker
    from stoker import workloads

    ds = stoker.Dataset.image_folder(root).with_options(threads=threads).shuffle(10_000, seed=0).repeat()
    ds = ds.map(workloads.imagenet_ops(224, 0), num_parallel_calls=stoker.AUTOTUNE)
    return ds.batch(batch, drop_remainder=True).prefetch(stoker.AUTOTUNE)


def make_loader(contender: str, root: str, batch: int) -> Any:
    """``mode:threads[:share]``: mode ``cpu`` (the engine makes the pixels), ``gpu``
    (``decode_on="cuda"``), ``mixed`` (``decode_on="cuda", cpu_share=share``) or ``auto``
    (``cpu_share="auto"``)."""
    import stoker.torch as skt

    mode, threads, *share = contender.split(":")
    ds = pipeline(root, int(threads), batch)
    if mode == "cpu":
        return skt.loader(ds, device="cuda", prefetch=3)
    cpu_share: float | str = "auto" if mode == "auto" else float(share[0]) if share else 0.0
    return skt.loader(ds, device="cuda", prefetch=3, decode_on="cuda", cpu_share=cpu_share)


def batches(loader: Any) -> Any:
    for b in loader:
        # NHWC float32 on the device: as NCHW it is channels-last already, no copy.
        yield b["image"].permute(0, 3, 1, 2), b["label"]


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def feed(contender: str, root: str, batch: int, n_batches: int) -> dict[str, Any]:
    import torch

    loader = make_loader(contender, root, batch)
    it = iter(loader)
    for _ in range(3):
        next(it)
    torch.cuda.synchronize()
    t, c = time.perf_counter(), cpu_seconds()
    n = 0
    for _ in range(n_batches):
        n += next(it)["image"].shape[0]
    torch.cuda.synchronize()
    seconds, cpu = time.perf_counter() - t, cpu_seconds() - c
    it.close()  # type: ignore[attr-defined]
    return {"images_per_s": n / seconds, "cpu_s_per_1000": 1000 * cpu / n, "cpu_share": loader.cpu_share}


def stage_profile(root: str, threads: int, batch: int, batches: int = 6) -> dict[str, Any]:
    """Where a ``decode_on="cuda"`` batch's time goes: the engine alone (its batches of
    compressed files and draws, as NumPy), and the device half on such batches (the whole
    half, and its decode alone), each synchronised, medians in ms."""
    import torch

    loader = make_loader(f"gpu:{threads}", root, batch)
    stage = loader._images
    chain = stage.chains[0]
    it = iter(loader._sharded)
    raws = [dict(next(it)) for _ in range(2)]
    t = time.perf_counter()
    raws += [dict(next(it)) for _ in range(batches)]
    engine_rate = batches * batch / (time.perf_counter() - t)
    it.close()

    def timed(fn: Any) -> float:
        fn(raws[0])
        torch.cuda.synchronize()
        times = []
        for r in raws[1:]:
            t = time.perf_counter()
            fn(r)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        return 1000 * statistics.median(times)

    files = chain.field
    return {
        "engine_images_per_s": engine_rate,
        "device_half_ms": timed(lambda r: stage(dict(r))),
        "decode_ms": timed(lambda r: stage._decode(chain, list(r[files]), list(r[chain.aux("origin")]))),
    }


def decoders(root: str, batch: int, rounds: int) -> dict[str, Any]:
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg

    files = sorted(Path(root).rglob("*.jpg"))[:batch]
    data = [f.read_bytes() for f in files]
    out: dict[str, Any] = {"batch": len(data)}

    def timed(run: Any) -> float:
        run()
        torch.cuda.synchronize()
        rates = []
        for _ in range(rounds):
            t = time.perf_counter()
            run()
            torch.cuda.synchronize()
            rates.append(len(data) / (time.perf_counter() - t))
        return statistics.median(rates)

    tensors = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in data]
    out["torchvision_decode_jpeg_cuda"] = timed(lambda: decode_jpeg(tensors, mode=ImageReadMode.RGB, device="cuda"))
    try:
        from nvidia import nvimgcodec

        decoder = nvimgcodec.Decoder()
        out["nvimgcodec_decode"] = timed(lambda: decoder.decode(data))
        hw = nvimgcodec.Decoder(backends=[nvimgcodec.Backend(nvimgcodec.BackendKind.HW_GPU_ONLY)])
        out["nvimgcodec_hardware_decoder"] = timed(lambda: hw.decode(data))
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        out["nvimgcodec_error"] = f"{type(e).__name__}: {e}"[:300]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="/tmp/gpu-decode")
    p.add_argument("--images", type=int, default=1024, help="distinct W3 JPEGs (W3L: half as many)")
    p.add_argument("--copies", type=int, default=4)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--feed-batches", type=int, default=20)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=6)
    cores = os.cpu_count()
    p.add_argument("--contenders", default=f"cpu:{cores},gpu:{cores},mixed:{cores}:0.25,auto:{cores}")
    p.add_argument("--train-contenders", default=None, help="default: --contenders")
    p.add_argument("--out", default="gpu_decode.json")
    p.add_argument("--markdown", default=None, help="Markdown file whose 'Decoding on the GPU' section is replaced")
    args = p.parse_args()
    import stoker
    import torch
    import torchvision

    torch.backends.cudnn.benchmark = True
    sets = {"W3": (f"{args.data}/w3", args.images, 1, args.copies),
            "W3L": (f"{args.data}/w3l", args.images // 2, 2, args.copies * 2)}
    for root, n, scale, copies in sets.values():
        write_data(root, n, scale, copies)
    try:
        import nvidia.dali as dali  # type: ignore[import-not-found]

        dali_version = dali.__version__
    except ImportError:
        dali_version = None
    results: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0), "cpus": os.cpu_count(), "torch": torch.__version__,
        "torchvision": torchvision.__version__, "stoker": stoker.__version__, "dali": dali_version,
        "command": "python bench/gpu_decode.py " + " ".join(sys.argv[1:]), "sets": {},
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    for name, (root, *_) in sets.items():
        r: dict[str, Any] = {"decoders": decoders(root, args.batch, 5), "feed": {}, "train": {}}
        print(name, "decoders", json.dumps(r["decoders"]), flush=True)
        r["profile"] = stage_profile(root, os.cpu_count() or 1, args.batch)
        print(name, "profile", json.dumps(r["profile"]), flush=True)
        for c in args.contenders.split(","):
            r["feed"][c] = feed(c, root, args.batch, args.feed_batches)
            print(name, "feed", c, json.dumps(r["feed"][c]), flush=True)
        for c in (args.train_contenders or args.contenders).split(","):
            loader = make_loader(c, root, args.batch)
            r["train"][c] = train(batches(loader), args.steps, args.warmup, arch="resnet18")
            r["train"][c]["cpu_share"] = loader.cpu_share
            print(name, "train", c, json.dumps(r["train"][c]), flush=True)
        results["sets"][name] = r
        Path(args.out).write_text(json.dumps(results, indent=1))
    if args.markdown:
        replace_section(Path(args.markdown), render(results))


HEADING = "## Decoding on the GPU (W3 and W3L into ResNet-18)"
MODES = {"cpu": "stoker, CPU path", "gpu": 'stoker `decode_on="cuda"`',
         "mixed": 'stoker `decode_on="cuda", cpu_share={share}`', "auto": 'stoker `decode_on="cuda", cpu_share="auto"`'}


def render(d: dict[str, Any]) -> str:
    """The BENCHMARKS.md section of a run's results."""
    cmd = d["command"].replace(" --out /root/out/gpu_decode.json", "").replace(" --markdown BENCHMARKS.md", "")
    carried = f", {d['carried']}" if d.get("carried") else ""
    lines = [
        HEADING, "",
        f"Run {d.get('date', '?')} · `{cmd}` · {d['gpu']}, {d['cpus']} CPU cores · torch {d['torch']}, "
        f"torchvision {d['torchvision']}{carried}, stoker {d['stoker']} · W3: W3's generator's JPEGs, W3L: photos "
        "twice the size (`size_scale=2`), each hard-linked for longer epochs · batches of 256, one process, one "
        "contender after the other, one run each (`bench/results/gpu_decode.json`).", "",
        "Each loader runs W3's chain (random-resized crop 224, flip, brightness/contrast jitter, normalise: "
        "`stoker.workloads.imagenet_ops`) with `threads` = the cores named: on the CPU (the fused DCT-scaled "
        'decode), or with `decode_on="cuda"` (the engine reads, shuffles and draws from the JPEG headers; '
        "torchvision's batched nvJPEG decode and the crop, resize, flip and affine map run on the GPU, see "
        'README "Decode on the GPU"). Feed: batches to the device after 3, no model; CPU seconds are the '
        "process's (user + system). Train: ResNet-18 (torchvision), bf16 autocast, channels-last, SGD; input "
        "stall from `stoker.timed` with a CUDA synchronise at each step end.", "",
    ]
    for name, r in d["sets"].items():
        dec, prof = r["decoders"], r.get("profile", {})
        line = (f"**{name}**: decoders alone, a batch of {dec['batch']}: torchvision `decode_jpeg(device=\"cuda\")` "
                f"{dec['torchvision_decode_jpeg_cuda']:,.0f} images/s")
        if "nvimgcodec_decode" in dec:
            line += (f"; nvImageCodec `Decoder.decode` {dec['nvimgcodec_decode']:,.0f}; nvImageCodec with only its "
                     f"hardware backend {dec['nvimgcodec_hardware_decoder']:,.0f}")
        if prof:
            line += (f". Per `decode_on=\"cuda\"` batch (synchronised medians): the device half "
                     f"{prof['device_half_ms']:.1f} ms, of which decoding {prof['decode_ms']:.1f} ms; the engine "
                     f"alone makes {prof['engine_images_per_s']:,.0f} images/s of compressed files and draws")
        lines += [line + ".", "",
                  "| loader | feed images/s | CPU s per 1,000 images | ResNet-18 images/s | input stall | "
                  "median step | share decoded by the engine (end) |",
                  "|---|---|---|---|---|---|---|"]
        for c, f in r["feed"].items():
            mode, cores, *share = c.split(":")
            label = MODES[mode].format(share=share[0] if share else "")
            t = r["train"].get(c)
            trained = (f"{t['images_per_s']:,.0f} | {t['input_stall_percent']:.1f} % | {t['step_ms_median']:.1f} ms"
                       if t else "| |")
            end = "" if f["cpu_share"] is None else f"{(t or f)['cpu_share']:.2f}"
            lines.append(f"| {label}, {cores} cores | {f['images_per_s']:,.0f} | {f['cpu_s_per_1000']:.2f} | "
                         f"{trained} | {end} |")
        tr = r["train"]
        pairs = [(k.split(":")[1], k, "cpu:" + k.split(":")[1]) for k in tr if k.startswith("gpu:")]
        ratios = [f"{tr[g]['images_per_s'] / tr[c]['images_per_s']:.2f}x on {n} cores" for n, g, c in pairs if c in tr]
        if ratios:
            lines += ["", "ResNet-18 images/s, `decode_on=\"cuda\"` ÷ CPU path: " + ", ".join(ratios) + "."]
        lines.append("")
    lines += [f"- {n}" for n in d.get("notes", [])]
    lines += [f"- {k} not measured: {v}" for k, v in d.get("missing", {}).items()]
    return "\n".join(lines).rstrip() + "\n"


def replace_section(path: Path, section: str) -> None:
    text = path.read_text() if path.exists() else ""
    start = text.find(HEADING)
    if start < 0:
        path.write_text(text.rstrip() + "\n\n" + section)
        return
    end = text.find("\n## ", start + 1)
    path.write_text(text[:start] + section + ("" if end < 0 else "\n" + text[end + 1 :]))


if __name__ == "__main__":
    main()
