import ArgumentParser
import Foundation

/// `bucketfs install`: hooks for mounting at login or boot (fstab helper, systemd user unit).
struct Install: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Install the fstab mount helper and/or the systemd user unit.",
        discussion: """
            --mount-helper links /sbin/mount.fuse.bucketfs to this binary (needs root), so that \
            `mount -t fuse.bucketfs demo DIR -o bucket=notes` and /etc/fstab lines work:
                demo  /home/me/buckets  fuse.bucketfs  noauto,user,bucket=notes  0  0
            --systemd-unit writes bucketfs@.service to ~/.config/systemd/user; start a mount at \
            login with:
                systemctl --user enable --now bucketfs@$(systemd-escape --path ~/buckets).service
            The unit mounts with the settings in the config file (`mounts` entry for that \
            directory) or the local demo.
            """
    )

    @Flag(name: .customLong("mount-helper"), help: "Link mount.fuse.bucketfs into --sbin.")
    var mountHelper = false

    @Option(help: "Where mount(8) looks for helpers.")
    var sbin: String = "/sbin"

    @Flag(name: .customLong("systemd-unit"), help: "Write the bucketfs@.service user unit.")
    var systemdUnit = false

    @Option(name: .customLong("unit-directory"), help: "Where to write the unit (default: $XDG_CONFIG_HOME/systemd/user).")
    var unitDirectory: String?

    @Option(help: "The bucketfs the link and the unit run (default: this binary; scripts/package writes the unit for /usr/bin/bucketfs).")
    var binary: String?

    func validate() throws {
        guard mountHelper || systemdUnit else { throw ValidationError("choose --mount-helper and/or --systemd-unit") }
    }

    func run() throws {
        let binary = self.binary ?? URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
        if mountHelper {
            let link = sbin + "/mount.fuse.bucketfs"
            try? FileManager.default.removeItem(atPath: link)
            do {
                try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: binary)
            } catch {
                throw CommandError("cannot create \(link) (run as root): \(error.localizedDescription)")
            }
            print("bucketfs: installed \(link) -> \(binary)")
        }
        if systemdUnit {
            let directory = unitDirectory ?? Config.directory.replacingOccurrences(of: "/bucketfs", with: "/systemd/user", options: .backwards)
            try Paths.createDirectory(directory)
            let path = directory + "/bucketfs@.service"
            do {
                try Self.unit(binary: binary).write(toFile: path, atomically: true, encoding: .utf8)
            } catch {
                throw CommandError("cannot write \(path): \(error.localizedDescription)")
            }
            print("bucketfs: wrote \(path)")
            print("start at login: systemctl --user daemon-reload && systemctl --user enable --now bucketfs@$(systemd-escape --path ~/buckets).service")
        }
    }

    /// The user unit; the instance name is the escaped mount path (%f unescapes it).
    static func unit(binary: String) -> String {
        """
        [Unit]
        Description=bucketfs mount at %f
        Documentation=man:fusermount3(1)
        After=network-online.target
        Wants=network-online.target

        [Service]
        Type=simple
        ExecStartPre=/usr/bin/mkdir -p %f
        ExecStart=\(binary) mount %f --foreground
        ExecStop=\(binary) unmount %f
        # SIGTERM also unmounts after storing pending saves.
        KillSignal=SIGTERM
        TimeoutStopSec=60
        Restart=on-failure
        RestartSec=5

        [Install]
        WantedBy=default.target

        """
    }
}
