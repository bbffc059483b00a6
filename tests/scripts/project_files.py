"""What the scripts' tests share: writing a small project's files."""
import os


def write(path, text):
    """Writes `text` to `path`, making its folders."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
