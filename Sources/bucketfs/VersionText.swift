import DiffMatchPatch
import JSONDiff

/// What changed from one version of an entity to the next, in one line: keys added, removed
/// and changed; for a text field, how many characters were added and removed.
struct VersionChanges: Codable, Hashable {
    struct Field: Codable, Hashable {
        var key: String
        /// `added`, `removed` or `changed`.
        var kind: String
        /// For a text changed into another text: characters added and removed.
        var charactersAdded: Int?
        var charactersRemoved: Int?
    }

    var fields: [Field]

    init(from old: JSONObject, to new: JSONObject) {
        var fields: [Field] = []
        for key in Set(old.keys).union(new.keys).sorted() {
            switch (old[key], new[key]) {
            case (nil, .some): fields.append(Field(key: key.string, kind: "added"))
            case (.some, nil): fields.append(Field(key: key.string, kind: "removed"))
            case (.string(let before)?, .string(let after)?) where JSONValue.string(before) != JSONValue.string(after):
                let (added, removed) = Self.characters(from: before, to: after)
                fields.append(Field(key: key.string, kind: "changed", charactersAdded: added, charactersRemoved: removed))
            case (let before?, let after?) where before != after:
                fields.append(Field(key: key.string, kind: "changed"))
            default: break
            }
        }
        self.fields = fields
    }

    /// `content +12 -3, +tags, -pinned, modificationDate`.
    var summary: String {
        guard !fields.isEmpty else { return "no change" }
        return fields.map { field in
            switch field.kind {
            case "added": return "+" + field.key
            case "removed": return "-" + field.key
            default:
                guard let added = field.charactersAdded, let removed = field.charactersRemoved else { return field.key }
                return "\(field.key) +\(added) -\(removed)"
            }
        }.joined(separator: ", ")
    }

    private static func characters(from before: String, to after: String) -> (added: Int, removed: Int) {
        let dmp = DiffMatchPatch()
        var diffs = dmp.diffMain(before, after)
        dmp.diffCleanupSemantic(&diffs)
        var added = 0
        var removed = 0
        for diff in diffs {
            switch diff.operation {
            case .insert: added += diff.text.count
            case .delete: removed += diff.text.count
            case .equal: break
            }
        }
        return (added, removed)
    }
}

/// A unified diff (`diff -u`) of two texts, line by line.
enum UnifiedDiff {
    private enum Line {
        case same(String)
        case removed(String)
        case added(String)
    }

    /// Empty when the texts are equal.
    static func render(from old: String, to new: String, oldLabel: String, newLabel: String, context: Int = 3) -> String {
        let lines = lineDiff(old, new)
        guard lines.contains(where: { if case .same = $0 { false } else { true } }) else { return "" }
        var output = "--- \(oldLabel)\n+++ \(newLabel)\n"
        // Hunks: runs of changes with up to `context` unchanged lines around them, joined when
        // the unchanged lines between two runs are no more than twice that.
        let changed = lines.indices.filter { if case .same = lines[$0] { false } else { true } }
        var hunkStart = 0
        while hunkStart < changed.count {
            var hunkEnd = hunkStart
            while hunkEnd + 1 < changed.count, changed[hunkEnd + 1] - changed[hunkEnd] <= 2 * context + 1 { hunkEnd += 1 }
            let first = max(0, changed[hunkStart] - context)
            let last = min(lines.count - 1, changed[hunkEnd] + context)
            var oldLine = 1
            var newLine = 1
            for line in lines[..<first] {
                switch line {
                case .same: oldLine += 1; newLine += 1
                case .removed: oldLine += 1
                case .added: newLine += 1
                }
            }
            var body = ""
            var oldCount = 0
            var newCount = 0
            for line in lines[first...last] {
                switch line {
                case .same(let text): body += " " + text + "\n"; oldCount += 1; newCount += 1
                case .removed(let text): body += "-" + text + "\n"; oldCount += 1
                case .added(let text): body += "+" + text + "\n"; newCount += 1
                }
            }
            output += "@@ -\(range(oldLine, oldCount)) +\(range(newLine, newCount)) @@\n" + body
            hunkStart = hunkEnd + 1
        }
        return output
    }

    private static func range(_ start: Int, _ count: Int) -> String {
        count == 0 ? "\(start - 1),0" : count == 1 ? "\(start)" : "\(start),\(count)"
    }

    /// Lines as diff-match-patch's line mode does it: each distinct line one character (from a
    /// private-use plane), the character diff mapped back to lines.
    private static func lineDiff(_ old: String, _ new: String) -> [Line] {
        var codes: [String: Character] = [:]
        var texts: [Character: String] = [:]
        func encode(_ text: String) -> String {
            var encoded = ""
            for line in text.split(separator: "\n", omittingEmptySubsequences: false).dropLast(text.hasSuffix("\n") ? 1 : 0) {
                let line = String(line)
                if let code = codes[line] {
                    encoded.append(code)
                } else {
                    let scalar = Unicode.Scalar(0xF0000 + UInt32(codes.count) % 0x1FFFE) ?? "\u{F0000}"
                    let code = Character(scalar)
                    codes[line] = code
                    texts[code] = line
                    encoded.append(code)
                }
            }
            return encoded
        }
        var dmp = DiffMatchPatch()
        dmp.diffTimeout = 0
        let diffs = dmp.diffMain(encode(old), encode(new), checkLines: false)
        var lines: [Line] = []
        for diff in diffs {
            for code in diff.text {
                let text = texts[code] ?? ""
                switch diff.operation {
                case .equal: lines.append(.same(text))
                case .delete: lines.append(.removed(text))
                case .insert: lines.append(.added(text))
                }
            }
        }
        return lines
    }
}
