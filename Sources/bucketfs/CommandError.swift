/// A failure a person can act on: printed as `Error: <message>` with exit status 1, without usage text.
struct CommandError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }

    /// Runs `body`, turning any error into a CommandError that says what was being done.
    static func context<T>(_ doing: String, _ body: () throws -> T) throws -> T {
        do { return try body() } catch let error as CommandError { throw error } catch {
            throw CommandError("\(doing): \(error)")
        }
    }
}
