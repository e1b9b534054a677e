import BucketFS
import Foundation
import Testing

/// Who may enter decides whether the kernel checks permissions.
@Suite(.serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct PermissionTests {
    @Test func theKernelChecksPermissionsOnlyWhenOthersMayEnter() throws {
        let own = try MountFixture()
        defer { own.close() }
        let ownOptions = try #require(Self.mountOptions(of: own.mountPoint))
        #expect(!ownOptions.contains("default_permissions"), "\(ownOptions)")
        // The owner may do everything the fixed modes allow, so writes still work without the checks.
        try Tool.shell("echo '{}' > notes/a.json && mv notes/a.json notes/b.json && rm notes/b.json", in: own.mountPoint)

        let shared = try MountFixture(options: MountOptions(fuseOptions: ["allow_other"]))
        defer { shared.close() }
        let sharedOptions = try #require(Self.mountOptions(of: shared.mountPoint))
        #expect(sharedOptions.contains("allow_other") && sharedOptions.contains("default_permissions"), "\(sharedOptions)")
    }

    /// The mount's options as /proc/self/mounts lists them.
    static func mountOptions(of mountPoint: String) -> [String]? {
        guard let table = ProcFile.text("/proc/self/mounts") else { return nil }
        for line in table.split(separator: "\n") {
            let fields = line.split(separator: " ")
            if fields.count > 3, fields[1] == mountPoint { return fields[3].split(separator: ",").map(String.init) }
        }
        return nil
    }
}
