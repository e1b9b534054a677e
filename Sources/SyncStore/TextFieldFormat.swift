import JSONDiff

/// One string field of each entity as a plain-text file (a note's body): the file's bytes are
/// exactly the field's string in UTF-8; the other fields are kept as they are, never shown.
///
/// - A save changes only the field (so the change sent is a text delta of it), plus `touchField`
///   stamped with the save time in seconds when one is named (Simplenote's `modificationDate`).
/// - A new file is `template` with the text in the field (and the touch field stamped).
/// - Without `trashField`, removing the file removes the entity; with it, the field is set to
///   true instead, and entities whose trash field is true have no file (Simplenote's trash).
///   A file made again under such a key takes the entity out of the trash (the field false).
/// - An entity whose field is missing or not a string shows as an empty file that cannot be
///   changed: bytes written to it are kept locally, state `invalid`, and never sent.
/// - Bytes that are not UTF-8 are kept locally the same way, and so is a new file while it is
///   empty (it is made, then written: the note is sent with its first text).
public struct TextFieldFormat: EntityFileFormat, Hashable {
    public let field: String
    public let fileExtension: String
    public let touchField: String?
    public let trashField: String?
    public let template: JSONObject

    public init(field: String, fileExtension: String = "txt", touchField: String? = nil, trashField: String? = nil, template: JSONObject = [:]) {
        self.field = field
        self.fileExtension = fileExtension
        self.touchField = touchField
        self.trashField = trashField
        self.template = template
    }

    public func render(_ value: JSONObject) -> [UInt8]? {
        if isTrashed(value) { return nil }
        return value[JSONKey(field)]?.stringValue.map { Array($0.utf8) } ?? []
    }

    public func parse(_ bytes: [UInt8], base: JSONObject?, replacingFile: Bool, at time: StoreTime) -> Result<JSONObject, EntityFileFormatError> {
        if bytes.isEmpty && (base == nil || !replacingFile) {
            // A file being made (create, or a shell's `>`) is empty before it is written: it
            // becomes a note with its first text, so no empty note reaches other clients first.
            return .failure(EntityFileFormatError("empty new file: it is sent once it holds text"))
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            return .failure(EntityFileFormatError("not UTF-8 text: kept here, not sent (the field \(field) holds a string of UTF-8)"))
        }
        guard var value = base else {
            var value = template
            value[JSONKey(field)] = .string(text)
            if let touchField { value[JSONKey(touchField)] = Self.seconds(time) }
            return .success(value)
        }
        // A file written under a trashed note's key (made again after a removal) restores it.
        let wasTrashed = isTrashed(value)
        if wasTrashed, let trashField { value[JSONKey(trashField)] = .bool(false) }
        if let problem = readOnlyReason(value) {
            // Only what the file shows (nothing) may be written back unchanged.
            if bytes.isEmpty { return .success(value) }
            return .failure(EntityFileFormatError("\(problem): the text view cannot change it; kept here, not sent"))
        }
        // Saving what the file already shows changes nothing (no new time stamp either).
        if !wasTrashed && value[JSONKey(field)]?.stringValue == text { return .success(value) }
        value[JSONKey(field)] = .string(text)
        if let touchField { value[JSONKey(touchField)] = Self.seconds(time) }
        return .success(value)
    }

    public var parsesOntoBase: Bool { true }

    public func removal(of value: JSONObject, at time: StoreTime) -> JSONObject? {
        guard let trashField else { return nil }
        var trashed = value
        trashed[JSONKey(trashField)] = .bool(true)
        if let touchField { trashed[JSONKey(touchField)] = Self.seconds(time) }
        return trashed
    }

    /// Why the entity's file is empty and cannot be changed, if it is: `missing` or
    /// `not-a-string` (shown in the state xattr as `readonly:<reason>`).
    public func readOnlyReason(_ value: JSONObject) -> String? {
        guard let content = value[JSONKey(field)] else { return "missing" }
        return content.stringValue == nil ? "not-a-string" : nil
    }

    /// The field's text, if it has one (`bucketfs ls`: the first line is the title).
    public func text(of value: JSONObject) -> String? {
        value[JSONKey(field)]?.stringValue
    }

    private func isTrashed(_ value: JSONObject) -> Bool {
        guard let trashField else { return false }
        return value[JSONKey(trashField)]?.boolValue == true
    }

    /// Seconds since the epoch, as Simplenote stamps `modificationDate`: an integer on a whole
    /// second, else with the fraction (milliseconds).
    static func seconds(_ time: StoreTime) -> JSONValue {
        let milliseconds = time / 1_000_000
        if milliseconds % 1000 == 0 { return .integer(milliseconds / 1000) }
        return .double(Double(milliseconds) / 1000)
    }
}
