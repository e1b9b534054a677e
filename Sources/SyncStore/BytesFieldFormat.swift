import Foundation
import JSONDiff

/// One field of each entity, holding bytes as base64, shown as a file of exactly those bytes
/// (an Apptimist user file, a message's decrypted data): a file system of arbitrary bytes on a
/// store of JSON values. The other fields are kept as they are, never shown.
///
/// - A save sets the field (and keeps the rest); a new file is an object of just the field.
/// - `fileExtension` may be empty: the files are then named by their key alone.
/// - A new file is not sent while it is empty (made, then written: it goes with its bytes).
/// - `readOnly`: the bytes cannot change (a received message): written bytes other than those
///   shown are kept locally, state `invalid`, never sent.
/// - `readOnlyKeys`: entities whose files show read-only (mode 0444) though the others are not
///   (the service's access-control files); the engine refuses a save of one.
public struct BytesFieldFormat: EntityFileFormat, Hashable {
    public let field: String
    public let fileExtension: String
    public let readOnly: Bool
    public let readOnlyKeys: Set<String>

    public init(field: String = "data", fileExtension: String = "", readOnly: Bool = false, readOnlyKeys: Set<String> = []) {
        self.field = field
        self.fileExtension = fileExtension
        self.readOnly = readOnly
        self.readOnlyKeys = readOnlyKeys
    }

    /// Whether the entity's file shows read-only.
    public func isReadOnly(key: String) -> Bool {
        readOnly || readOnlyKeys.contains(key)
    }

    public func render(_ value: JSONObject) -> [UInt8]? {
        bytes(of: value) ?? []
    }

    /// The bytes the field holds; nil when it holds none (missing, or not base64 text).
    public func bytes(of value: JSONObject) -> [UInt8]? {
        guard let text = value[JSONKey(field)]?.stringValue, let data = Data(base64Encoded: text) else { return nil }
        return Array(data)
    }

    /// The value of `bytes` as this format keeps them (a new entity).
    public func value(of bytes: [UInt8], base: JSONObject = [:]) -> JSONObject {
        var value = base
        value[JSONKey(field)] = .string(Data(bytes).base64EncodedString())
        return value
    }

    public func parse(_ bytes: [UInt8], base: JSONObject?, replacingFile: Bool, at time: StoreTime) -> Result<JSONObject, EntityFileFormatError> {
        if readOnly {
            if let base, replacingFile, render(base) == bytes { return .success(base) }
            return .failure(EntityFileFormatError("read-only: kept here, not sent"))
        }
        if bytes.isEmpty && (base == nil || !replacingFile) {
            return .failure(EntityFileFormatError("empty new file: it is sent once it holds bytes"))
        }
        if let base, replacingFile, render(base) == bytes { return .success(base) }
        return .success(value(of: bytes, base: base ?? [:]))
    }

    public var parsesOntoBase: Bool { true }

    /// Base64 text merged by jsondiff is no file either side wrote: the local bytes win whole.
    public var mergesEdits: Bool { false }

    public func removal(of value: JSONObject, at time: StoreTime) -> JSONObject? { nil }
}
