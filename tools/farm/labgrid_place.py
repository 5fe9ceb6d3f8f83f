"""One board-farm place for `barebench farm`, through labgrid's library (docs/farm.md).

`barebench farm` builds the card image and locks the place with `labgrid-client`; this script
then does what labgrid's drivers do for the place in the environment file: power off, card to
the host through the SD mux (USBSDMuxDriver, USBSDWireDriver or USBSDWire3Driver, when the place
has one), write the image through the storage driver (USBStorageDriver, or CardFileDriver for a
card that is a file), card to the board, open the console (SerialDriver or any
ConsoleProtocol driver) and power on. It then copies the console to its standard output until
`barebench farm` closes its standard input (the results are complete or the place timed out),
and powers the board off. Progress goes to standard error as `barebench-farm: stage TEXT`
lines, failures as `barebench-farm: error TEXT`; exit status 0, 2 when a step failed, 3 when
the console closed by itself (the board, or the program serving its console, went away).

    labgrid_place.py describe --env ENV          # JSON: the places the environment names
    labgrid_place.py run --env ENV --place P --image IMG
    labgrid_place.py power-off --env ENV --place P
"""

import argparse
import json
import logging
import os
import select
import signal
import sys
import time

# Drivers that switch a card between the host and the board, and drivers that write it, in
# the order they are looked for (labgrid's names; CardFileDriver is barebench_labgrid.py's).
MUX_DRIVERS = ("USBSDMuxDriver", "USBSDWireDriver", "USBSDWire3Driver")
STORAGE_DRIVERS = ("USBStorageDriver", "CardFileDriver")
# A console served by the board itself (QEMU's, or a network console that exists only while
# the board has power) cannot be opened before power-on: it is opened after, for this long.
CONSOLE_OPEN_AFTER_POWER_ON_S = 15.0
CONSOLE_OPEN_RETRY_S = 0.1
# One console read waits this long for up to this many bytes.
CONSOLE_READ_WAIT_S = 0.2
CONSOLE_READ_BYTES = 4096
# Per-place target options an environment file may give (`options:`): settings added to the
# farm's, and the place's own console timeout in seconds (a Pi 1 takes longer than a Pi 5).
SETTINGS_OPTION = "barebench_settings"
TIMEOUT_OPTION = "barebench_timeout"

EXIT_STEP_FAILED = 2
EXIT_CONSOLE_CLOSED = 3


def say(kind, text):
    print(f"barebench-farm: {kind} {text}", file=sys.stderr, flush=True)


def place_of(config, target_name):
    """The coordinator place of a target: its RemotePlace's name, else the target's own name."""
    resources = config.get_targets()[target_name].get("resources") or {}
    entries = resources if isinstance(resources, list) else [resources]
    for entry in entries:
        remote = (entry or {}).get("RemotePlace")
        if isinstance(remote, dict) and remote.get("name"):
            return str(remote["name"])
    return target_name


def role_for(config, place):
    for target_name in config.get_targets():
        if place_of(config, target_name) == place:
            return target_name
    names = ", ".join(place_of(config, name) for name in config.get_targets())
    raise LookupError(f"the environment names no place {place!r} (it names: {names})")


def first_driver(target, names):
    from labgrid.exceptions import NoDriverFoundError

    for name in names:
        try:
            return target.get_driver(name)
        except NoDriverFoundError:
            continue
    return None


def describe(args):
    from labgrid.config import Config

    config = Config(args.env)
    places = []
    for target_name, target in config.get_targets().items():
        options = (target or {}).get("options") or {}
        timeout = options.get(TIMEOUT_OPTION)
        places.append(
            {
                "target": target_name,
                "place": place_of(config, target_name),
                "settings": str(options.get(SETTINGS_OPTION, "")),
                "timeout": None if timeout is None else int(timeout),
            }
        )
    json.dump(places, sys.stdout)
    print()
    return 0


def open_target(args):
    from labgrid import Environment

    env = Environment(args.env)
    target = env.get_target(role_for(env.config, args.place))
    return env, target


def try_activate(target, console):
    try:
        target.activate(console)
        return True
    except Exception:  # noqa: BLE001 - any failure to connect means "not yet"
        return False


def told_to_stop():
    """Whether `barebench farm` closed our standard input: the place is done (or interrupted)."""
    ready, _, _ = select.select([sys.stdin], [], [], 0)
    return bool(ready) and not os.read(sys.stdin.fileno(), 4096)


def stream_console(console, out):
    """Copies the console to `out` until standard input closes (0) or the console does (3)."""
    from pexpect import TIMEOUT

    while True:
        if told_to_stop():
            return 0
        try:
            data = console.read(size=CONSOLE_READ_BYTES, max_size=65536, timeout=CONSOLE_READ_WAIT_S)
        except TIMEOUT:
            continue
        except Exception as error:  # noqa: BLE001 - pyserial says "socket disconnected" and alike
            say("error", f"the console closed: {error}")
            return EXIT_CONSOLE_CLOSED
        out.write(data)
        out.flush()


def run(args):
    console_out = os.fdopen(os.dup(1), "wb", buffering=0)
    # labgrid and its helpers print on stdout; only console bytes go there.
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    stage = lambda text: say("stage", text)  # noqa: E731
    env = target = power = None
    try:
        stage("loading the environment")
        env, target = open_target(args)
        power = target.get_driver("PowerProtocol")
        console = target.get_driver("ConsoleProtocol", activate=False)
        mux = first_driver(target, MUX_DRIVERS)
        storage = first_driver(target, STORAGE_DRIVERS)
        if storage is None:
            raise LookupError(f"place {args.place} has none of {', '.join(STORAGE_DRIVERS)} to write its card")
        stage("powering off")
        power.off()
        if mux is not None:
            stage("switching the card to the host")
            mux.set_mode("host")
        stage(f"writing the card ({os.path.getsize(args.image)} bytes)")
        storage.write_image(args.image)
        if mux is not None:
            stage("switching the card to the board")
            mux.set_mode("dut")
        if told_to_stop():
            stage("stopped before power-on")
            return 0
        console_open = try_activate(target, console)
        stage("powering on")
        power.on()
        deadline = time.monotonic() + CONSOLE_OPEN_AFTER_POWER_ON_S
        while not console_open and time.monotonic() < deadline:
            time.sleep(CONSOLE_OPEN_RETRY_S)
            console_open = try_activate(target, console)
        if not console_open:
            target.activate(console)  # once more, for the error it raises
        stage("console open")
        return stream_console(console, console_out)
    except Exception as error:  # noqa: BLE001 - every failure is reported by place
        say("error", f"{type(error).__name__}: {error}")
        return EXIT_STEP_FAILED
    finally:
        if power is not None:
            try:
                power.off()
                say("stage", "powered off")
            except Exception as error:  # noqa: BLE001
                say("error", f"powering off failed: {error}")
        if env is not None:
            env.cleanup()


def power_off(args):
    try:
        env, target = open_target(args)
        target.get_driver("PowerProtocol").off()
        env.cleanup()
        return 0
    except Exception as error:  # noqa: BLE001
        say("error", f"powering off failed: {type(error).__name__}: {error}")
        return EXIT_STEP_FAILED


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("describe", "run", "power-off"):
        command = commands.add_parser(name)
        command.add_argument("--env", required=True, help="labgrid environment file")
        if name != "describe":
            command.add_argument("--place", required=True, help="the coordinator's place name")
        if name == "run":
            command.add_argument("--image", required=True, help="the card image to write")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    # `barebench farm` ends a place with SIGTERM when it does not stop by itself; the finally
    # blocks above still power the board off.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    handlers = {"describe": describe, "run": run, "power-off": power_off}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
