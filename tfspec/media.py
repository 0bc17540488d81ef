"""Pictures from files, read as untrusted input.

A picture a user hands to ``generate --image`` may come from anywhere, so it is opened the way a careful server opens
an upload:

- only the formats a model's image processor reads are tried (``PICTURE_FORMATS``), recognised by their content, not
  their name; Pillow's other plugins, EPS among them (which starts Ghostscript, an interpreter of its own), are never
  reached;
- the file is a regular file of at most ``PICTURE_BYTES`` (a FIFO, a device or a directory is refused at once);
- its size in pixels is read from its header and bounded before any pixel is decoded (``picture_side``): a
  110 KB PNG that claims 30000×30000 pixels, or a 1×60000 strip that would become a 60000×60000 square, is one
  line, not a ``DecompressionBombError`` or 14 GB asked of the allocator;
- GIF, WebP and APNG animations give their first frame.

Audio files are not read from the command line yet; a reader of them belongs here, under the same rules.
"""

from __future__ import annotations

import re
import warnings

from .errors import shown
from .files import open_regular

# what image processors read (PIL formats by their identifiers); each is decoded by Pillow's own code
PICTURE_FORMATS = ("PNG", "JPEG", "WEBP", "BMP", "GIF")
PICTURE_BYTES = 64 << 20
PICTURE_SIDE = 4096  # pixels a side, however small the model's pictures: a photo of a phone is about 4000


def picture_side(side: int) -> int:
    """The longest side read for a model whose pictures have ``side`` pixels a side: ``PICTURE_SIDE``, or four times
    the model's own side where that is more. It bounds the pixels too, and a picture padded to a square."""
    return max(PICTURE_SIDE, 4 * side)


class PictureError(ValueError):
    """A picture file that is refused, with the reason (one line, naming the file)."""


def read_picture(path, side: int, mode: str):
    """The first frame of the picture file ``path`` as a Pillow image in ``mode`` (``"L"``, ``"RGB"``), for a model
    that reads pictures of ``side`` pixels a side; a ``PictureError`` naming the file and why otherwise."""
    from PIL import Image, UnidentifiedImageError

    longest = picture_side(side)
    too_large = f"larger than tfspec reads for this model (at most {longest:,} pixels a side)"
    try:
        handle = open_regular(path, PICTURE_BYTES)
    except FileNotFoundError:
        raise PictureError(f"{shown(path)}: no such picture file") from None
    except OSError as exc:  # a directory, a FIFO, a device, a file past the bound
        raise PictureError(f"{shown(path)}: {exc.strerror or exc}") from None
    with handle, warnings.catch_warnings():
        # Pillow's own bomb check warns, then fails, far above the budget; the budget is checked first where it can be
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(handle, formats=PICTURE_FORMATS) as opened:
                width, height = opened.size  # from the header: nothing decoded yet
                if max(width, height) > longest:
                    raise PictureError(f"{shown(path)}: a picture of {width}×{height} pixels, {too_large}")
                if min(width, height) < 1:
                    raise PictureError(f"{shown(path)}: a picture of {width}×{height} pixels: nothing to read")
                return opened.convert(mode)  # decodes the pixels (the first frame): a damaged file fails here
        except UnidentifiedImageError:
            raise PictureError(f"{shown(path)}: not a picture file tfspec reads (it reads "
                               f"{', '.join(PICTURE_FORMATS[:-1])} and {PICTURE_FORMATS[-1]})") from None
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:  # Pillow's check, in open
            claimed = re.search(r"\((\d+) pixels\)", str(exc))
            size = f"of {int(claimed.group(1)):,} pixels" if claimed else "claiming more pixels than Pillow reads"
            raise PictureError(f"{shown(path)}: a picture {size}, {too_large}") from None
        except PictureError:
            raise
        except (OSError, ValueError, SyntaxError, EOFError) as exc:  # a truncated or damaged file
            raise PictureError(f"{shown(path)}: a damaged picture file ({shown(str(exc))[:200]})") from None
