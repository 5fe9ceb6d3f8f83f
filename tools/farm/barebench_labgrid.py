"""labgrid driver for a card that is a file: the SD card image a QEMU place of `make farm-qemu`
boots from (docs/farm.md). An environment file loads it with `imports: [barebench_labgrid.py]`.

`CardFileDriver.write_image(IMAGE)` does for the file what labgrid's USBStorageDriver does for a
card in a USB-SD-Mux (`dd if=IMAGE of=/dev/sdX oflag=direct conv=fdatasync`): the whole image,
from byte 0, synced before it returns; runs of zeros become holes, as `dd conv=sparse` makes
them, so a mostly empty card costs little disk space. Like a real card, the file keeps what the
board wrote to it until the next write.
"""

import os

import attr

from labgrid.driver.common import Driver
from labgrid.factory import target_factory
from labgrid.step import step

CHUNK_BYTES = 1 << 20


@target_factory.reg_driver
@attr.s(eq=False)
class CardFileDriver(Driver):
    """Writes card images to a file (the card of an emulated board)."""

    bindings = {}
    path = attr.ib(validator=attr.validators.instance_of(str))

    @Driver.check_active
    @step(args=["filename"])
    def write_image(self, filename=None, mode=None, partition=None, skip=0, seek=0):
        if partition is not None or skip or seek:
            raise ValueError("CardFileDriver writes whole images only")
        size = os.path.getsize(filename)
        zeros = bytes(CHUNK_BYTES)
        with open(filename, "rb") as source, open(self.path, "wb") as card:
            while True:
                chunk = source.read(CHUNK_BYTES)
                if not chunk:
                    break
                if chunk == zeros[: len(chunk)]:
                    card.seek(len(chunk), os.SEEK_CUR)
                else:
                    card.write(chunk)
            card.truncate(size)
            card.flush()
            os.fsync(card.fileno())
