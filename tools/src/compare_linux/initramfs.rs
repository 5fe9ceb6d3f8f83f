//! The initramfs `barebench compare-linux` boots Linux with: a `newc` cpio archive (the format
//! Linux unpacks, Documentation/driver-api/early-userspace/buffer-format.rst) holding busybox,
//! fio with its libraries, the storage modules and an `/init` that loads them, runs fio and
//! prints its JSON between two marker lines.
#![forbid(unsafe_code)]

use std::fs;
use std::io::{self, Write};
use std::path::Path;

/// The line `/init` prints before fio's JSON.
pub const JSON_BEGIN: &str = "barebench-compare-linux: fio json begin";
/// The line after it.
pub const JSON_END: &str = "barebench-compare-linux: fio json end";
/// The line saying whether the NVMe namespace polls (`… 1`).
pub const POLL_LINE: &str = "barebench-compare-linux: nvme0n1 io_poll";
/// The line with fio's exit status.
pub const FIO_EXIT: &str = "barebench-compare-linux: fio exit";

/// The modules the storage drivers need, in load order (each after the ones its `depends=`
/// names; Debian's 6.1 arm64 kernel builds MMC and mmc_block in, NVMe, sdhci, USB and SCSI as
/// modules).
pub const MODULES: &[&str] = &[
    "crct10dif_common",
    "crct10dif_generic",
    "crc-t10dif",
    "crc64",
    "crc64_rocksoft_generic",
    "crc64-rocksoft",
    "t10-pi",
    "nvme-core",
    "nvme",
    "sdhci",
    "cqhci",
    "sdhci-pci",
    "usb-common",
    "usbcore",
    "xhci-hcd",
    "xhci-pci",
    "scsi_common",
    "scsi_mod",
    "sd_mod",
    "usb-storage",
    "uas",
];

/// `/init`: mounts, loads the modules, waits for the block devices named in `/devices`, runs
/// `/jobs.fio`, prints the JSON and powers off (PSCI SYSTEM_OFF ends QEMU).
pub fn init_script() -> String {
    let modules = MODULES.join(" ");
    format!(
        r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin
export LD_LIBRARY_PATH=/lib/aarch64-linux-gnu:/usr/lib/aarch64-linux-gnu:/usr/lib/aarch64-linux-gnu/ceph
mkdir -p /proc /sys /dev /tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for module in {modules}; do
    # One polled queue for fio's hipri jobs (Linux's polled path); the others keep interrupts.
    options=""; [ $module = nvme ] && options="poll_queues=1"
    insmod /modules/$module.ko $options || echo "insmod $module failed"
done
for device in $(cat /devices); do
    waited=0
    while [ ! -b $device ] && [ $waited -lt 300 ]; do sleep 0.1; waited=$((waited + 1)); done
    [ -b $device ] || echo "barebench-compare-linux: $device did not appear"
done
# Whether the NVMe namespace has a poll queue for the hipri jobs (1) or not (0).
[ -e /sys/block/nvme0n1/queue/io_poll ] && echo "{POLL_LINE} $(cat /sys/block/nvme0n1/queue/io_poll)"
fio --output-format=json /jobs.fio > /tmp/fio.json 2> /tmp/fio.err
echo "{FIO_EXIT} $?"
cat /tmp/fio.err
echo "{JSON_BEGIN}"
cat /tmp/fio.json
echo "{JSON_END}"
poweroff -f
"#
    )
}

/// Writes a `newc` cpio archive.
pub struct CpioWriter<W: Write> {
    out: W,
    next_inode: u32,
    written_bytes: u64,
}

const NEWC_MAGIC: &str = "070701";
const TRAILER: &str = "TRAILER!!!";
const MODE_DIRECTORY: u32 = 0o040000;
const MODE_REGULAR: u32 = 0o100000;
const MODE_SYMLINK: u32 = 0o120000;

impl<W: Write> CpioWriter<W> {
    pub fn new(out: W) -> Self {
        CpioWriter { out, next_inode: 1, written_bytes: 0 }
    }

    pub fn add_directory(&mut self, name: &str) -> io::Result<()> {
        self.add_entry(name, MODE_DIRECTORY | 0o755, 2, &[])
    }

    pub fn add_file(&mut self, name: &str, permissions: u32, data: &[u8]) -> io::Result<()> {
        self.add_entry(name, MODE_REGULAR | (permissions & 0o7777), 1, data)
    }

    pub fn add_symlink(&mut self, name: &str, target: &str) -> io::Result<()> {
        self.add_entry(name, MODE_SYMLINK | 0o777, 1, target.as_bytes())
    }

    /// Adds everything under `dir` (directories, files, symlinks; sorted, so the archive is the
    /// same each time), named from the archive's root.
    pub fn add_tree(&mut self, dir: &Path) -> io::Result<()> {
        self.add_tree_under(dir, "")
    }

    fn add_tree_under(&mut self, dir: &Path, prefix: &str) -> io::Result<()> {
        let mut entries: Vec<_> = fs::read_dir(dir)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|entry| entry.file_name());
        for entry in entries {
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            let path = entry.path();
            let metadata = fs::symlink_metadata(&path)?;
            if metadata.file_type().is_symlink() {
                self.add_symlink(&name, &fs::read_link(&path)?.to_string_lossy())?;
            } else if metadata.is_dir() {
                self.add_directory(&name)?;
                self.add_tree_under(&path, &format!("{name}/"))?;
            } else if metadata.is_file() {
                use std::os::unix::fs::PermissionsExt;
                self.add_file(&name, metadata.permissions().mode(), &fs::read(&path)?)?;
            }
        }
        Ok(())
    }

    /// Writes the trailer and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.add_entry(TRAILER, 0, 1, &[])?;
        // Archives are padded to a multiple of 512 bytes, as cpio(1) does.
        let padding = (512 - self.written_bytes % 512) % 512;
        self.out.write_all(&vec![0; padding as usize])?;
        Ok(self.out)
    }

    fn add_entry(&mut self, name: &str, mode: u32, links: u32, data: &[u8]) -> io::Result<()> {
        let inode = if name == TRAILER { 0 } else { self.next_inode };
        self.next_inode += 1;
        let name_bytes = name.len() + 1;
        let fields = [inode, mode, 0, 0, links, 0, data.len() as u32, 0, 0, 0, 0, name_bytes as u32, 0];
        let mut header = String::from(NEWC_MAGIC);
        for field in fields {
            header.push_str(&format!("{field:08X}"));
        }
        self.write_padded(&[header.as_bytes(), name.as_bytes(), &[0]].concat())?;
        self.write_padded(data)
    }

    /// Writes `bytes` and zeros up to the next multiple of 4.
    fn write_padded(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        let padding = (4 - bytes.len() % 4) % 4;
        self.out.write_all(&[0; 3][..padding])?;
        self.written_bytes += (bytes.len() + padding) as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads a newc archive back: (name, mode, data) per entry, up to the trailer.
    fn entries(archive: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
        let mut entries = Vec::new();
        let mut at = 0;
        loop {
            assert_eq!(&archive[at..at + 6], NEWC_MAGIC.as_bytes(), "magic at {at}");
            let field = |index: usize| {
                let start = at + 6 + index * 8;
                u32::from_str_radix(std::str::from_utf8(&archive[start..start + 8]).unwrap(), 16).unwrap()
            };
            let (mode, size, name_size) = (field(1), field(6) as usize, field(11) as usize);
            let name_start = at + 110;
            let name = String::from_utf8(archive[name_start..name_start + name_size - 1].to_vec()).unwrap();
            assert_eq!(archive[name_start + name_size - 1], 0);
            let data_start = (name_start + name_size).next_multiple_of(4);
            if name == TRAILER {
                break;
            }
            entries.push((name, mode, archive[data_start..data_start + size].to_vec()));
            at = (data_start + size).next_multiple_of(4);
        }
        entries
    }

    #[test]
    fn the_archive_is_newc_with_padding_and_a_trailer() {
        let mut writer = CpioWriter::new(Vec::new());
        writer.add_directory("bin").unwrap();
        writer.add_file("bin/busybox", 0o755, b"12345").unwrap();
        writer.add_symlink("bin/sh", "busybox").unwrap();
        let archive = writer.finish().unwrap();
        assert_eq!(archive.len() % 512, 0);
        let entries = entries(&archive);
        assert_eq!(
            entries,
            vec![
                ("bin".to_string(), 0o040755, vec![]),
                ("bin/busybox".to_string(), 0o100755, b"12345".to_vec()),
                ("bin/sh".to_string(), 0o120777, b"busybox".to_vec()),
            ]
        );
    }

    #[test]
    fn a_tree_is_archived_sorted_with_its_links() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("usr/bin")).unwrap();
        fs::write(dir.path().join("usr/bin/fio"), b"elf").unwrap();
        std::os::unix::fs::symlink("usr/bin", dir.path().join("bin")).unwrap();
        let mut writer = CpioWriter::new(Vec::new());
        writer.add_tree(dir.path()).unwrap();
        let names: Vec<String> =
            entries(&writer.finish().unwrap()).into_iter().map(|entry| entry.0).collect();
        assert_eq!(names, ["bin", "usr", "usr/bin", "usr/bin/fio"]);
    }

    #[test]
    fn init_loads_every_module_in_order_and_brackets_the_json() {
        let init = init_script();
        assert!(init.starts_with("#!/bin/busybox sh\n"));
        assert!(init.contains("for module in crct10dif_common crct10dif_generic"));
        assert!(init.contains(r#"[ $module = nvme ] && options="poll_queues=1""#));
        let position = |text: &str| init.find(text).unwrap();
        assert!(position("nvme-core") < position(" nvme ") && position("usb-storage") < position(" uas"));
        assert!(
            position(JSON_BEGIN) < position("cat /tmp/fio.json")
                && position("cat /tmp/fio.json") < position(JSON_END)
        );
        assert!(init.trim_end().ends_with("poweroff -f"));
        assert!(init.contains(&format!("echo \"{POLL_LINE} $(cat /sys/block/nvme0n1/queue/io_poll)\"")));
    }
}
