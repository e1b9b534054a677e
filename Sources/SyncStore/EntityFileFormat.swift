import JSONDiff

/// How an entity's value shows as the bytes of its file, and how bytes written to that file
/// become the value again: the one seam between the store's JSON values and what a bucket
/// directory shows. Each bucket has one; `JSONFileFormat` unless the mount chose another.
///
/// The store keeps the rendered bytes (`EntityInfo.content`), so reads, sizes and listings cost
/// nothing extra; it renders after every remote change and parses at every local save. Bytes
/// that do not parse are kept as written (state `invalid`, not sent), as with any format.
public protocol EntityFileFormat: Sendable {
    /// What entity files end in, without the dot (`json`).
    var fileExtension: String { get }
    /// The file's bytes for `value`; nil when the entity has no file in this view.
    func render(_ value: JSONObject) -> [UInt8]?
    /// `render`'s bytes and the value's compact JSON (as the store keeps values) together: a
    /// format whose file is the value's JSON makes both from one rendering.
    func renderWithCompactJSON(_ value: JSONObject) -> (file: [UInt8]?, compact: String)
    /// The value that `bytes` written to the entity's file stand for, or why they stand for none.
    /// `base`: the value they replace; `replacingFile`: whether the entity had a file (false for
    /// a new file, or one made again after a removal: `base` is then the last value known, if any).
    func parse(_ bytes: [UInt8], base: JSONObject?, replacingFile: Bool, at time: StoreTime) -> Result<JSONObject, EntityFileFormatError>
    /// The pieces of the compact JSON of the value `bytes` stand for (`parse`'s, without a
    /// base), when the format makes it without building the value (a JSON file's:
    /// `JSONValue.compactObjectPieces`, for a note of many small keys a third of the memory); nil
    /// otherwise, and for bytes that are no value (`parse` says why). The pieces need the bytes
    /// no more: they may go before the text is put together.
    func compactValuePieces(parsing bytes: [UInt8]) -> CompactObjectPieces?
    /// Whether `parse` reads `base` (the store decodes it only then: a JSON file's save need not).
    var parsesOntoBase: Bool { get }
    /// What removing the file does to the entity: nil removes it; a value keeps it with that
    /// value and without a file (a trash flag set).
    func removal(of value: JSONObject, at time: StoreTime) -> JSONObject?
    /// Whether a local edit and a remote one of the same entity are merged (jsondiff's
    /// transform). False for opaque values (bytes): the local value is then kept whole, state
    /// `conflict`, and sent over the server's.
    var mergesEdits: Bool { get }
}

extension EntityFileFormat {
    public var mergesEdits: Bool { true }

    public func renderWithCompactJSON(_ value: JSONObject) -> (file: [UInt8]?, compact: String) {
        (render(value), JSONValue.object(value).compactRendered())
    }
}

extension EntityFileFormat {
    public func compactValuePieces(parsing bytes: [UInt8]) -> CompactObjectPieces? { nil }
}

/// Why written bytes are no value of their entity (the `invalid` state's reason).
public struct EntityFileFormatError: Error, Hashable, Sendable, CustomStringConvertible {
    public let description: String

    public init(_ description: String) {
        self.description = description
    }
}

/// The design's format: the entity as pretty JSON (sorted keys); any JSON object is a value.
public struct JSONFileFormat: EntityFileFormat, Hashable {
    public init() {}

    public var fileExtension: String { "json" }

    public func render(_ value: JSONObject) -> [UInt8]? {
        JSONValue.object(value).prettyRenderedBytes()
    }

    public func renderWithCompactJSON(_ value: JSONObject) -> (file: [UInt8]?, compact: String) {
        let rendered = JSONValue.object(value).compactAndPrettyRendered()
        return (rendered.pretty, rendered.compact)
    }

    public func parse(_ bytes: [UInt8], base: JSONObject?, replacingFile: Bool, at time: StoreTime) -> Result<JSONObject, EntityFileFormatError> {
        do {
            let value = try JSONValue(parsing: bytes)
            guard let object = value.objectValue else {
                return .failure(EntityFileFormatError("not a JSON object (top-level \(value.typeName))"))
            }
            return .success(object)
        } catch {
            return .failure(EntityFileFormatError("invalid JSON: \(error)"))
        }
    }

    public func removal(of value: JSONObject, at time: StoreTime) -> JSONObject? { nil }

    public var parsesOntoBase: Bool { false }

    public func compactValuePieces(parsing bytes: [UInt8]) -> CompactObjectPieces? {
        JSONValue.compactObjectPieces(parsing: bytes)
    }
}
