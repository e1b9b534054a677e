/// The `o` of a change (spec "Change: c").
public enum ChangeOperation: String, Hashable, Sendable {
    /// `M`: modify (or create) the entity with the diff in `v`.
    case modify = "M"
    /// `-`: remove the entity.
    case remove = "-"

    init(field fields: JSONFields) throws(ProtocolError) {
        let text = try fields.string("o")
        guard let operation = ChangeOperation(rawValue: text) else {
            throw .invalidValue(field: "o", value: excerpt(text))
        }
        self = operation
    }
}
