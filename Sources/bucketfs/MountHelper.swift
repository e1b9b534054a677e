/// Turns mount(8)'s helper call into `bucketfs mount` arguments, so that an /etc/fstab line
/// (or `mount -t fuse.bucketfs SOURCE DIR -o OPTIONS`) works:
///
///     demo  /home/me/buckets  fuse.bucketfs  noauto,user,bucket=notes  0  0
///     work  /home/me/work     fuse.bucketfs  bucket=notes:todo,ro       0  0
///
/// SOURCE is `demo` (the local demo server) or a remote saved by `bucketfs login`.
enum MountHelper {
    /// Options mount(8) passes that mean nothing to bucketfs (or that it already honours).
    static let ignoredOptions: Set<String> = [
        "rw", "defaults", "auto", "noauto", "user", "users", "nouser", "_netdev", "nofail",
        "exec", "noexec", "suid", "nosuid", "dev", "nodev", "async", "atime", "noatime", "relatime",
    ]

    static func translate(_ arguments: [String]) throws -> [String] {
        var positional: [String] = []
        var options: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            switch argument {
            case "-o":
                guard index + 1 < arguments.count else { throw CommandError("-o needs options") }
                options += arguments[index + 1].split(separator: ",").map(String.init)
                index += 1
            case "-n", "-s", "-f", "-v":
                break  // no mtab, sloppy, fake, verbose: nothing to do
            default:
                if argument.hasPrefix("-o") {
                    options += argument.dropFirst(2).split(separator: ",").map(String.init)
                } else {
                    positional.append(argument)
                }
            }
            index += 1
        }
        guard positional.count == 2 else {
            throw CommandError("usage: mount.fuse.bucketfs SOURCE DIR [-o OPTIONS] (SOURCE: demo or a remote name)")
        }
        var result = ["mount", positional[1]]
        if positional[0] != "demo" { result += ["--remote", positional[0]] }
        for option in options {
            let parts = option.split(separator: "=", maxSplits: 1).map(String.init)
            switch parts[0] {
            case "ro": result.append("--read-only")
            case "allow_other": result.append("--allow-other")
            case "verbose": result.append("--verbose")
            case "bucket" where parts.count == 2:
                for bucket in parts[1].split(separator: ":") { result += ["--bucket", String(bucket)] }
            case "store" where parts.count == 2: result += ["--store", parts[1]]
            case "log_file" where parts.count == 2: result += ["--log-file", parts[1]]
            case let name where ignoredOptions.contains(name) || name.hasPrefix("x-") || name.hasPrefix("comment="):
                continue
            default:
                throw CommandError("unknown mount option \(option) (known: bucket=A:B, ro, allow_other, store=FILE, log_file=FILE)")
            }
        }
        return result
    }
}
