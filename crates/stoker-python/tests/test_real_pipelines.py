"""Real tf.data pipelines, written as their sources write them (the keras-io TFRecord recipe,
TensorFlow's tutorials for images, CSV, text and audio, tensorflow/models' CIFAR-10 input,
tensorflow/nmt's tokenizing input, a generator), run by tf.data and by stoker with only the
module changed (``lib`` is ``tf.data`` or ``sk.data``): the same elements, dtypes included.
Their map functions call TensorFlow, so stoker traces them (see ``test_tf_functions``)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import stoker as sk


def _tf() -> Any:
    return pytest.importorskip("tensorflow")


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return tuple(_plain(v) for v in x)
    a = np.asarray(x)
    return (a.dtype.str if a.dtype.kind != "O" else "O", a.shape, a.tolist())


def _same(make: Any, take: int | None = None) -> sk.Dataset:
    tf = _tf()
    ours, theirs = make(sk.data), make(tf.data)
    a = [_plain(e) for e in (ours.take(take) if take else ours)]
    b = [_plain(e) for e in (theirs.take(take) if take else theirs).as_numpy_iterator()]
    assert len(a) == len(b) > 0
    assert a == b
    return ours


def test_keras_io_tfrecord_recipe(tmp_path: Path) -> None:
    """keras-io "Creating TFRecords" / "How to train a Keras model on TFRecord files"."""
    tf = _tf()
    image_size = [24, 32]
    path = str(tmp_path / "train.tfrec")
    with tf.io.TFRecordWriter(path) as w:
        for i in range(10):
            img = (np.arange(24 * 32 * 3).reshape(24, 32, 3) * (i + 1) % 256).astype(np.uint8)
            feature = {
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[tf.io.encode_jpeg(img).numpy()])),
                "target": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 3])),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())

    def decode_image(image: Any) -> Any:
        image = tf.image.decode_jpeg(image, channels=3)
        image = tf.cast(image, tf.float32)
        image = tf.reshape(image, [*image_size, 3])
        return image

    def read_tfrecord(example: Any, labeled: bool) -> Any:
        tfrecord_format = (
            {"image": tf.io.FixedLenFeature([], tf.string), "target": tf.io.FixedLenFeature([], tf.int64)}
            if labeled
            else {"image": tf.io.FixedLenFeature([], tf.string)}
        )
        example = tf.io.parse_single_example(example, tfrecord_format)
        image = decode_image(example["image"])
        if labeled:
            label = tf.cast(example["target"], tf.int32)
            return image, label
        return image

    def load_dataset(lib: Any, filenames: list[str], labeled: bool = True) -> Any:
        ignore_order = lib.Options()
        ignore_order.experimental_deterministic = False
        dataset = lib.TFRecordDataset(filenames)
        dataset = dataset.with_options(ignore_order)
        dataset = dataset.map(partial(read_tfrecord, labeled=labeled), num_parallel_calls=lib.AUTOTUNE)
        return dataset

    def get_dataset(lib: Any) -> Any:
        dataset = load_dataset(lib, [path])
        dataset = dataset.prefetch(buffer_size=lib.AUTOTUNE)
        return dataset.batch(4)

    # Order ignored: compared as sets of batches' rows.
    tfd = _tf().data
    ours = sorted(str(_plain(r)) for b in get_dataset(sk.data) for r in zip(*b))
    theirs = sorted(str(_plain(r)) for b in get_dataset(tfd).as_numpy_iterator() for r in zip(*b))
    assert ours == theirs and len(ours) == 10


def test_tensorflow_load_images_tutorial(tmp_path: Path) -> None:
    """tensorflow.org/tutorials/load_data/images: list_files, labels from the path, decode,
    resize."""
    tf = _tf()
    class_names = np.array(["daisy", "roses", "tulips"])
    for c in class_names:
        (tmp_path / c).mkdir()
        for i in range(3):
            img = (np.arange(20 * 30 * 3).reshape(20, 30, 3) * (i + 2) % 256).astype(np.uint8)
            tf.io.write_file(str(tmp_path / c / f"{i}.jpg"), tf.io.encode_jpeg(img))
    img_height, img_width = 12, 16

    def get_label(file_path: Any) -> Any:
        parts = tf.strings.split(file_path, "/")
        one_hot = parts[-2] == class_names
        return tf.argmax(one_hot)

    def decode_img(img: Any) -> Any:
        img = tf.io.decode_jpeg(img, channels=3)
        return tf.image.resize(img, [img_height, img_width])

    def process_path(file_path: Any) -> Any:
        label = get_label(file_path)
        img = tf.io.read_file(file_path)
        img = decode_img(img)
        return img, label

    def make(lib: Any) -> Any:
        list_ds = lib.Dataset.list_files(str(tmp_path / "*/*"), shuffle=False)
        return list_ds.map(process_path, num_parallel_calls=lib.AUTOTUNE).batch(4)

    ds = _same(make)
    assert "TensorFlow function" in ds.explain()


def test_tensorflow_csv_tutorial(tmp_path: Path) -> None:
    """tensorflow.org/tutorials/load_data/csv: make_csv_dataset and CsvDataset."""
    tf = _tf()
    path = tmp_path / "titanic.csv"
    rows = ["survived,sex,age,n_siblings_spouses,parch,fare,class,deck,embark_town,alone"]
    for i in range(12):
        rows.append(
            f"{i % 2},{'male' if i % 3 else 'female'},{20 + i}.0,{i % 2},0,{7.25 + i},Third,unknown,Southampton,y"
        )
    path.write_text("\n".join(rows) + "\n")

    def make(lib: Any) -> Any:
        return lib.experimental.make_csv_dataset(
            str(path), batch_size=5, label_name="survived", num_epochs=1, ignore_errors=True, shuffle=False
        )

    _same(make)

    def csv_rows(lib: Any) -> Any:
        titanic_types = [
            tf.int32,
            tf.string,
            tf.float32,
            tf.int32,
            tf.int32,
            tf.float32,
            tf.string,
            tf.string,
            tf.string,
            tf.string,
        ]
        return lib.experimental.CsvDataset(str(path), titanic_types, header=True)

    _same(csv_rows)


def test_tensorflow_text_tutorial(tmp_path: Path) -> None:
    """tensorflow.org/tutorials/load_data/text (the Illiad example): a labeled dataset per
    file, concatenated, shuffled once."""
    tf = _tf()
    names = ["cowper.txt", "derby.txt", "butler.txt"]
    for k, name in enumerate(names):
        (tmp_path / name).write_text("\n".join(f"line {i} of {name} {'x' * k}" for i in range(7)) + "\n")

    def labeler(example: Any, index: int) -> Any:
        return example, tf.cast(index, tf.int64)

    def make(lib: Any) -> Any:
        labeled_data_sets = []
        for i, file_name in enumerate(names):
            lines_dataset = lib.TextLineDataset(str(tmp_path / file_name))
            labeled_dataset = lines_dataset.map(lambda ex: labeler(ex, i))  # noqa: B023 - the tutorial's code
            labeled_data_sets.append(labeled_dataset)
        all_labeled_data = labeled_data_sets[0]
        for labeled_dataset in labeled_data_sets[1:]:
            all_labeled_data = all_labeled_data.concatenate(labeled_dataset)
        return all_labeled_data.map(lambda text, label: (tf.strings.lower(text), label))

    _same(make)


def test_tensorflow_models_cifar10_input(tmp_path: Path) -> None:
    """tensorflow/models' CIFAR-10 binary input: FixedLengthRecordDataset, decode_raw, the label
    byte, a depth-major image made height-width-channels."""
    tf = _tf()
    label_bytes, height, width, depth = 1, 32, 32, 3
    image_bytes = height * width * depth
    record_bytes = label_bytes + image_bytes
    rng = np.random.default_rng(0)
    path = tmp_path / "data_batch_1.bin"
    path.write_bytes(rng.integers(0, 256, (6, record_bytes), dtype=np.uint8).tobytes())

    def parse_record(raw_record: Any) -> Any:
        record_vector = tf.io.decode_raw(raw_record, tf.uint8)
        label = tf.cast(record_vector[0], tf.int32)
        depth_major = tf.reshape(record_vector[label_bytes:record_bytes], [depth, height, width])
        image = tf.cast(tf.transpose(depth_major, [1, 2, 0]), tf.float32)
        return image, label

    def make(lib: Any) -> Any:
        dataset = lib.FixedLengthRecordDataset(str(path), record_bytes)
        return dataset.map(parse_record).batch(2)

    _same(make)


def test_tensorflow_audio_tutorial(tmp_path: Path) -> None:
    """tensorflow.org/tutorials/audio/simple_audio (its TF 2 input): decode_wav, squeeze, the
    label from the path, a spectrogram."""
    tf = _tf()
    commands = ["down", "go"]
    for c in commands:
        (tmp_path / c).mkdir()
        for i in range(2):
            wave = np.sin(np.arange(1600) * (i + 1) / 10).astype(np.float32)[:, None] * 0.5
            tf.io.write_file(str(tmp_path / c / f"{i}.wav"), tf.audio.encode_wav(wave, 16000))

    def get_label(file_path: Any) -> Any:
        parts = tf.strings.split(input=file_path, sep="/")
        return parts[-2]

    def get_waveform_and_label(file_path: Any) -> Any:
        label = get_label(file_path)
        audio_binary = tf.io.read_file(file_path)
        audio, _ = tf.audio.decode_wav(contents=audio_binary)
        waveform = tf.squeeze(audio, axis=-1)
        return waveform, label

    def get_spectrogram(waveform: Any) -> Any:
        spectrogram = tf.signal.stft(waveform, frame_length=255, frame_step=128)
        return tf.abs(spectrogram)[..., tf.newaxis]

    def make(lib: Any) -> Any:
        files = lib.Dataset.list_files(str(tmp_path / "*/*.wav"), shuffle=False)
        waveform_ds = files.map(get_waveform_and_label, num_parallel_calls=lib.AUTOTUNE)
        return waveform_ds.map(lambda audio, label: (get_spectrogram(audio), label == commands))

    _same(make)


def test_tensorflow_nmt_style_input(tmp_path: Path) -> None:
    """tensorflow/nmt's iterator_utils: source and target lines zipped, split into words,
    looked up in a vocabulary table, filtered by length, lengths attached."""
    tf = _tf()
    (tmp_path / "src.txt").write_text("a b c\nb c\na a a a a a a a\nc\n")
    (tmp_path / "tgt.txt").write_text("x y\ny\nx x\nz z z\n")
    vocab = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(["a", "b", "c", "x", "y", "z"], tf.constant([3, 4, 5, 6, 7, 8], tf.int64)),
        default_value=0,
    )
    src_max_len = 5

    def make(lib: Any) -> Any:
        src = lib.TextLineDataset(str(tmp_path / "src.txt"))
        tgt = lib.TextLineDataset(str(tmp_path / "tgt.txt"))
        ds = lib.Dataset.zip((src, tgt))
        ds = ds.map(lambda s, t: (tf.strings.split([s]).values, tf.strings.split([t]).values))
        ds = ds.filter(lambda s, t: tf.logical_and(tf.size(s) > 0, tf.size(t) > 0))
        ds = ds.map(lambda s, t: (s[:src_max_len], t))
        ds = ds.map(lambda s, t: (tf.cast(vocab.lookup(s), tf.int32), tf.cast(vocab.lookup(t), tf.int32)))
        return ds.map(lambda s, t: (s, t, tf.size(s), tf.size(t)))

    _same(make)


def test_a_generator_with_a_tensorflow_map() -> None:
    tf = _tf()

    def gen() -> Any:
        for i in range(6):
            yield np.arange(i + 1, dtype=np.int64), f"row {i}".encode()

    signature = (tf.TensorSpec([None], tf.int64), tf.TensorSpec([], tf.string))

    def make(lib: Any) -> Any:
        ds = lib.Dataset.from_generator(gen, output_signature=signature)
        return ds.map(lambda x, s: (tf.reduce_sum(x), tf.strings.length(s), tf.cast(x, tf.float32) * 0.5))

    _same(make)
