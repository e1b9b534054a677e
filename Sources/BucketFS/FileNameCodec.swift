/// Reversible mapping between store names (keys, bucket names) and file names (DESIGN.md,
/// "The file system contract"): bytes outside `[A-Za-z0-9._@-]`, and a leading `.`, become `%XX`.
public enum FileNameCodec {
    /// The file name for a key or bucket name (`a/b` -> `a%2Fb`, `.x` -> `%2Ex`).
    public static func encode(_ name: String) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(name.utf8.count)
        for (index, byte) in name.utf8.enumerated() {
            if isPlain(byte, at: index) {
                output.append(byte)
            } else {
                output.append(UInt8(ascii: "%"))
                output.append(hexDigit(byte >> 4))
                output.append(hexDigit(byte & 0x0F))
            }
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// The key or bucket name for a file name, or nil if the file name is not the canonical
    /// encoding of any name (so the mapping stays one-to-one both ways).
    public static func decode(_ fileName: String) -> String? {
        let bytes = Array(fileName.utf8)
        guard !bytes.isEmpty else { return nil }
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%") {
                guard index + 2 < bytes.count, let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2])
                else { return nil }
                output.append(high << 4 | low)
                index += 3
            } else {
                output.append(byte)
                index += 1
            }
        }
        guard let name = String(validating: output, as: UTF8.self), encode(name) == fileName else { return nil }
        return name
    }

    /// The file name of an entity key (`<encoded key>.json`).
    public static func fileName(forKey key: String) -> String {
        encode(key) + ".json"
    }

    /// What a file name inside a bucket stands for: an entity, or a local-only file.
    public static func itemName(forFileName fileName: String) -> MountItemName {
        if ScratchNames.isScratch(fileName) { return .localFile(name: fileName) }
        guard fileName.hasSuffix(".json"), fileName.utf8.count > 5 else { return .localFile(name: fileName) }
        let stem = String(decoding: fileName.utf8.dropLast(5), as: UTF8.self)
        guard let key = decode(stem) else { return .localFile(name: fileName) }
        return .entity(key: key)
    }

    /// The name before `.json` of a `*.json` file that stays local only because that name is no
    /// key's file name (`My Note.json`, `100%.json`); nil for entities, scratch names and others.
    public static func localJSONStem(_ fileName: String) -> String? {
        // Asked at every save of a local file (editors' scratch files): the cheap tests first.
        guard !ScratchNames.isScratch(fileName), fileName.hasSuffix(".json"), fileName.utf8.count > 5,
            case .localFile = itemName(forFileName: fileName)
        else { return nil }
        return String(decoding: fileName.utf8.dropLast(5), as: UTF8.self)
    }

    /// An entity file name close to `name` that needs no encoding and whose key every server
    /// takes: each run of other bytes (`%` and a leading `.` included) becomes `-` (`My Note` ->
    /// `My-Note.json`). What status proposes for a name that cannot sync as it is.
    public static func plainFileName(for name: String) -> String {
        var output: [UInt8] = []
        for (index, byte) in name.utf8.enumerated() {
            if isPlain(byte, at: index) {
                output.append(byte)
            } else if output.last != UInt8(ascii: "-") {
                output.append(UInt8(ascii: "-"))
            }
        }
        return String(decoding: output.prefix(256), as: UTF8.self) + ".json"
    }

    /// The file name shown for a store name.
    public static func fileName(for item: MountItemName) -> String {
        switch item {
        case .entity(let key): return fileName(forKey: key)
        case .localFile(let name): return name
        }
    }

    /// Whether `byte` at `index` of a name stands in its file name as it is (a leading `.` does not).
    private static func isPlain(_ byte: UInt8, at index: Int) -> Bool {
        isPlain(byte) && !(index == 0 && byte == UInt8(ascii: "."))
    }

    private static func isPlain(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "@"),
            UInt8(ascii: "-"):
            return true
        default:
            return false
        }
    }

    private static func hexDigit(_ value: UInt8) -> UInt8 {
        value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "A") + value - 10
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        default: return nil
        }
    }
}

/// Names editors and tools use for temporary files; they stay local even if they end in `.json`.
public enum ScratchNames {
    /// vim swap (`.x.swp`, `.x.swo`, ...), backups (`x~`), emacs locks (`.#x`), vim's write probe
    /// (`4913`), and mkstemp-style temporaries (`.x.AbC123`, used by rsync and many editors).
    /// Any leading-dot name is local anyway: a key starting with `.` is encoded as `%2E...`.
    public static func isScratch(_ name: String) -> Bool {
        if name.hasPrefix(".") || name.hasSuffix("~") || name == "4913" { return true }
        return false
    }
}
