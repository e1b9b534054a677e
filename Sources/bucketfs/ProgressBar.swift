import Foundation

/// A one-line progress display for long work (first sync, re-index) on a terminal: count, rate
/// and time left, redrawn in place at most ten times a second. Silent when not a terminal.
final class ProgressBar: @unchecked Sendable {
    private let enabled: Bool
    private let started = Date()
    private var lastDraw = Date.distantPast
    private let lock = NSLock()

    init(enabled: Bool) { self.enabled = enabled }

    func update(label: String, done: Int, total: Int, bytes: Int) {
        guard enabled else { return }
        lock.lock()
        defer { lock.unlock() }
        let now = Date()
        guard now.timeIntervalSince(lastDraw) >= 0.1 else { return }
        lastDraw = now
        let elapsed = max(now.timeIntervalSince(started), 0.001)
        let rate = Double(done) / elapsed
        var line = "\(label): \(done)"
        if total > 0 {
            let fraction = min(1, Double(done) / Double(total))
            let width = 24
            let filled = Int(fraction * Double(width))
            line = "\(label) [\(String(repeating: "#", count: filled))\(String(repeating: ".", count: width - filled))] \(done)/\(total) entities"
            if rate > 0, done < total { line += ", ~\(Self.duration(Double(total - done) / rate)) left" }
        }
        line += ", " + ByteCountFormatter.string(fromByteCount: Int64(bytes), countStyle: .file)
        line += String(format: " (%.0f entities/s)", rate)
        FileHandle.standardError.write(Data(("\r\u{1B}[K" + line).utf8))
    }

    func finish(_ message: String) {
        guard enabled else { return }
        lock.lock()
        defer { lock.unlock() }
        FileHandle.standardError.write(Data(("\r\u{1B}[K" + message + "\n").utf8))
    }

    static func duration(_ seconds: Double) -> String {
        let total = Int(seconds.rounded(.up))
        return total >= 60 ? "\(total / 60)m\(total % 60)s" : "\(total)s"
    }
}
