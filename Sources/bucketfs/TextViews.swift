import BucketFS
import Foundation
import JSONDiff
import SyncStore

/// A bucket shown as plain text: one field per file (`--text-field`, or `text` in the config
/// file, per mount or per saved remote). README, "Notes as plain text".
struct TextViewSettings: Codable, Hashable {
    /// The string field each file shows (`content`).
    var field: String
    /// The files' extension (`txt` when not given; `md`...).
    var `extension`: String?
    /// A field stamped with the save time, in seconds (`modificationDate`).
    var touch: String?
    /// A field set to true instead of removing the entity (`deleted`); such entities have no file.
    var trashField: String?
    /// A JSON object file: the other fields of an entity made by a new file.
    var template: String?

    /// The store's format for these settings (reads the template file).
    func format() throws -> TextFieldFormat {
        var templateObject: JSONObject = [:]
        if let template {
            let path = Paths.absolute(template)
            guard let data = FileManager.default.contents(atPath: path) else {
                throw CommandError("cannot read the template \(path)")
            }
            guard let object = (try? JSONValue(parsing: Array(data)))?.objectValue else {
                throw CommandError("the template \(path) is not a JSON object")
            }
            templateObject = object
        }
        let fileExtension = `extension` ?? "txt"
        guard !fileExtension.isEmpty, fileExtension.utf8.allSatisfy({ $0 > 0x20 && $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: ".") }) else {
            throw CommandError("the text view's extension \(fileExtension) is not a file name extension (like txt or md)")
        }
        guard fileExtension != "json" else { throw CommandError("the text view's extension cannot be json (the JSON view's)") }
        return TextFieldFormat(field: field, fileExtension: fileExtension, touchField: touch, trashField: trashField, template: templateObject)
    }

    /// The text views the command line asks for, over those of the config file: per bucket,
    /// `--text-field [BUCKET:]FIELD[=EXT]`, `--touch [BUCKET:]FIELD`, `--trash-field
    /// [BUCKET:]FIELD`, `--template [BUCKET:]FILE`; without `BUCKET:`, for every mounted bucket.
    static func resolve(
        buckets: [String], configured: [String: TextViewSettings], textFields: [String], touch: [String],
        trashFields: [String], templates: [String]
    ) throws -> [String: TextViewSettings] {
        var views = configured.filter { buckets.contains($0.key) }
        for option in textFields {
            for (bucket, value) in try perBucket(option, buckets: buckets, option: "--text-field") {
                let parts = value.split(separator: "=", maxSplits: 1).map(String.init)
                guard let field = parts.first, !field.isEmpty else { throw CommandError("--text-field needs a field name, e.g. content or content=md") }
                var view = TextViewSettings(field: field)
                view.extension = parts.count > 1 ? parts[1] : views[bucket]?.extension
                (view.touch, view.trashField, view.template) = (views[bucket]?.touch, views[bucket]?.trashField, views[bucket]?.template)
                views[bucket] = view
            }
        }
        func apply(_ values: [String], option: String, _ set: (inout TextViewSettings, String) -> Void) throws {
            for value in values {
                for (bucket, setting) in try perBucket(value, buckets: buckets, option: option) {
                    guard var view = views[bucket] else {
                        throw CommandError("\(option) goes with a text view: give --text-field for bucket \(bucket) too")
                    }
                    set(&view, setting)
                    views[bucket] = view
                }
            }
        }
        try apply(touch, option: "--touch") { $0.touch = $1 }
        try apply(trashFields, option: "--trash-field") { $0.trashField = $1 }
        try apply(templates, option: "--template") { $0.template = $1 }
        return views
    }

    /// `BUCKET:VALUE` for that bucket, or `VALUE` for every bucket.
    private static func perBucket(_ text: String, buckets: [String], option: String) throws -> [(String, String)] {
        if let colon = text.firstIndex(of: ":"), buckets.contains(String(text[..<colon])) {
            let value = String(text[text.index(after: colon)...])
            guard !value.isEmpty else { throw CommandError("\(option) \(text): nothing after the bucket name") }
            return [(String(text[..<colon]), value)]
        }
        guard !text.isEmpty else { throw CommandError("\(option) needs a value") }
        return buckets.map { ($0, text) }
    }
}

/// How `ls`, `status` and `watch` name an entity: its file name in its bucket's view, and for a
/// text view its title (the text's first line), so a person finds a note by what it says.
struct EntityNames {
    private var formats: [String: any EntityFileFormat] = [:]
    private let store: SyncStore

    init(store: SyncStore) {
        self.store = store
    }

    mutating func format(of bucket: String) -> any EntityFileFormat {
        if let known = formats[bucket] { return known }
        let format = (try? store.fileFormat(ofBucket: bucket)) ?? JSONFileFormat()
        formats[bucket] = format
        return format
    }

    mutating func fileName(bucket: String, key: String) -> String {
        FileNameCodec.fileName(forKey: key, extension: format(of: bucket).fileExtension)
    }

    /// The first line of the entity's text, for a text view; nil otherwise.
    mutating func title(bucket: String, value: JSONObject?) -> String? {
        guard let view = format(of: bucket) as? TextFieldFormat, let value else { return nil }
        return Self.firstLine(view.text(of: value) ?? "")
    }

    /// The title of the entity the store holds under `key` (its last value, also once removed).
    mutating func title(bucket: String, key: String) -> String? {
        guard let entity = try? store.entity(bucket: bucket, key: key) else { return nil }
        return title(bucket: bucket, value: entity.value ?? entity.ghost)
    }

    static func firstLine(_ text: String) -> String {
        let line = text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: true).first.map(String.init) ?? ""
        return line.trimmingCharacters(in: .whitespaces)
    }

    static func tags(of value: JSONObject?) -> [String] {
        value?["tags"]?.arrayValue?.compactMap(\.stringValue) ?? []
    }
}
