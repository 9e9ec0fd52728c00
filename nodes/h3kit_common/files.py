"""The model files the loaders offer and watch."""

from __future__ import annotations

import os

AUTO = "(auto)"  # an mmproj input's choice: the vision tower inside the file, else an mmproj*.gguf beside it


def gguf_files(folder: str) -> list[str]:
    """The .gguf files under ComfyUI's `folder` paths (its own lists leave .gguf out without ComfyUI-GGUF)."""
    import folder_paths

    found = {n for n in folder_paths.get_filename_list(folder) if n.lower().endswith(".gguf")}
    for root in getattr(folder_paths, "get_folder_paths", lambda _: [])(folder):
        files, _ = folder_paths.recursive_search(root, excluded_dir_names=[".git"])
        found.update(folder_paths.filter_files_extensions(files, {".gguf"}))
    return sorted(found)


def file_stamp(path: str | os.PathLike) -> tuple | None:
    """What identifies the file's content cheaply (device, inode, size, mtime, ctime); None when it is gone.

    ctime is in it because a file rewritten in place with its size and mtime put back (os.utime) still gets a
    new ctime on POSIX: the system sets it on every write and no call can set it back. On Windows st_ctime is
    the creation time, which a rewrite keeps; the streamed loader's block heads cover that case."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def stamp_of(folder: str, name: str) -> str:
    """A loader's IS_CHANGED: a replaced or removed file is loaded (or refused) again."""
    import folder_paths

    path = folder_paths.get_full_path(folder, name)
    return str(file_stamp(path) if path else None)
