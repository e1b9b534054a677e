import JSONDiff

/// Reversible mappings between store names and file names (DESIGN.md, "The file system
/// contract", and README "What the files mean").
///
/// Bucket names: bytes outside `[A-Za-z0-9._@-]`, and a leading `.`, become `%XX` (`encode`).
///
/// Entity keys read naturally. The server takes keys of `[A-Za-z0-9._%@-]`, and clients such as
/// Simplenote write any other text into a key percent-escaped (`caf%C3%A9`). A key that is the
/// canonical escape of a text (`keyEscape`: every byte outside `[A-Za-z0-9._@-]` as `%XX`, upper
/// case) shows as that text when a file name can hold it as it is: no `/`, no `%`, no leading
/// `.` (`caf%C3%A9` -> `café.json`, `My%20Note` -> `My Note.json`). Every other key shows
/// `encode`d, so its file name has a `%` and the two forms never meet (`a%2Fb` -> `a%252Fb.json`,
/// `100%25` -> `100%2525.json`, `caf%c3%a9` -> `caf%25c3%25a9.json`). Back: a name without `%` is
/// the key `keyEscape(name)` (so a name a person types syncs: `My Note.json` is the key
/// `My%20Note`); a name with `%` is the key it `decode`s to, if that key shows as that very name;
/// any other name is a local-only file. One-to-one on every key.
public enum FileNameCodec {
    /// The file name for a key or bucket name (`a/b` -> `a%2Fb`, `.x` -> `%2Ex`).
    public static func encode(_ name: String) -> String {
        percentEscaped(name, escapingLeadingDot: true)
    }

    /// The key or bucket name for a file name, or nil if the file name is not the canonical
    /// encoding of any name (so the mapping stays one-to-one both ways).
    public static func decode(_ fileName: String) -> String? {
        guard !fileName.isEmpty, let name = decode(percentEscaped: Array(fileName.utf8)), exactlyEqual(encode(name), fileName)
        else { return nil }
        return name
    }

    /// `%XX` escapes (either case) made bytes; nil for a stray `%` or bytes that are not UTF-8.
    private static func decode(percentEscaped bytes: [UInt8]) -> String? {
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
        return String(validating: output, as: UTF8.self)
    }

    /// The file name of an entity key (`<stem>.json`, see the type's comment); `fileExtension`:
    /// the bucket's (its `EntityFileFormat`'s), without the dot; empty: the stem alone.
    public static func fileName(forKey key: String, extension fileExtension: String = "json") -> String {
        stem(forKey: key) + suffix(fileExtension)
    }

    /// What follows the stem: `.<extension>`, or nothing for a format without one.
    static func suffix(_ fileExtension: String) -> String {
        fileExtension.isEmpty ? "" : "." + fileExtension
    }

    /// The key a typed name stands for: its bytes outside `[A-Za-z0-9._@-]` as `%XX` (upper case).
    public static func keyEscape(_ text: String) -> String {
        percentEscaped(text, escapingLeadingDot: false)
    }

    /// Bytes outside `[A-Za-z0-9._@-]` (and a leading `.` when asked: a file name would hide it)
    /// as `%XX`, upper case.
    private static func percentEscaped(_ text: String, escapingLeadingDot: Bool) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(text.utf8.count)
        for (index, byte) in text.utf8.enumerated() {
            if isPlain(byte) && !(escapingLeadingDot && index == 0 && byte == UInt8(ascii: ".")) {
                output.append(byte)
            } else {
                output.append(contentsOf: [UInt8(ascii: "%"), hexDigit(byte >> 4), hexDigit(byte & 0x0F)])
            }
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// The text a key is the canonical escape of (`keyEscape(text) == key`), if any.
    static func text(ofKey key: String) -> String? {
        guard key.utf8.contains(UInt8(ascii: "%")) else { return key.utf8.allSatisfy(isPlain) ? key : nil }
        guard let text = decode(percentEscaped: Array(key.utf8)), keyEscape(text) == key else { return nil }
        return text
    }

    static func stem(forKey key: String) -> String {
        if let text = text(ofKey: key), showsAsItIs(text) { return text }
        return encode(key)
    }

    /// A text a file name holds as it is, apart from every `encode`d name (which has a `%`).
    private static func showsAsItIs(_ text: String) -> Bool {
        !text.isEmpty && !text.hasPrefix(".")
            && !text.utf8.contains { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "%") || $0 == 0 }
    }

    /// What a file name inside a bucket stands for: an entity, or a local-only file.
    public static func itemName(forFileName fileName: String, extension fileExtension: String = "json") -> MountItemName {
        if ScratchNames.isScratch(fileName) { return .localFile(name: fileName) }
        let suffix = Self.suffix(fileExtension)
        guard fileName.hasSuffix(suffix), fileName.utf8.count > suffix.utf8.count else { return .localFile(name: fileName) }
        let stem = String(decoding: fileName.utf8.dropLast(suffix.utf8.count), as: UTF8.self)
        guard stem.utf8.contains(UInt8(ascii: "%")) else { return .entity(key: keyEscape(stem)) }
        guard let key = decode(stem), exactlyEqual(self.stem(forKey: key), stem) else { return .localFile(name: fileName) }
        return .entity(key: key)
    }

    /// The name before `.json` of a `*.json` file that stays local only because that name is no
    /// key's file name (`My Note.json`, `100%.json`); nil for entities, scratch names and others.
    public static func localJSONStem(_ fileName: String, extension fileExtension: String = "json") -> String? {
        // Asked at every save of a local file (editors' scratch files): the cheap tests first.
        let suffix = Self.suffix(fileExtension)
        guard !ScratchNames.isScratch(fileName), fileName.hasSuffix(suffix), fileName.utf8.count > suffix.utf8.count,
            case .localFile = itemName(forFileName: fileName, extension: fileExtension)
        else { return nil }
        return String(decoding: fileName.utf8.dropLast(suffix.utf8.count), as: UTF8.self)
    }

    /// An entity file name close to `name` that shows as it is and whose key every server takes:
    /// each run of `%`, `/` and control bytes, and a leading `.`, becomes `-` (`100%` ->
    /// `100-.json`). What status proposes for a name that cannot sync as it is.
    public static func plainFileName(for name: String, extension fileExtension: String = "json") -> String {
        var output: [UInt8] = []
        for (index, byte) in name.utf8.enumerated() {
            let replaced = byte == UInt8(ascii: "%") || byte == UInt8(ascii: "/") || byte < 0x20
                || (index == 0 && byte == UInt8(ascii: "."))
            if !replaced {
                output.append(byte)
            } else if output.last != UInt8(ascii: "-") {
                output.append(UInt8(ascii: "-"))
            }
        }
        // The server takes keys of at most 256 bytes; cut at a character boundary.
        var text = String(decoding: output, as: UTF8.self)
        while keyEscape(text).utf8.count > 256 { text.removeLast() }
        return text + Self.suffix(fileExtension)
    }

    /// `plainFileName` for an entity the server refused for its key: from the key's text, when
    /// it has one (a name typed too long), else from the key itself (`a/b` -> `a-b.json`).
    public static func plainFileName(forKey key: String, extension fileExtension: String = "json") -> String {
        plainFileName(for: text(ofKey: key) ?? key, extension: fileExtension)
    }

    /// The file name shown for a store name.
    public static func fileName(for item: MountItemName, extension fileExtension: String = "json") -> String {
        switch item {
        case .entity(let key): return fileName(forKey: key, extension: fileExtension)
        case .localFile(let name): return name
        }
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
