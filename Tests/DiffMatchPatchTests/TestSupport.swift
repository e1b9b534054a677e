@testable import DiffMatchPatch

/// Shorthands so the ported reference cases read like the originals.
func eq(_ text: String) -> Diff { Diff(.equal, text) }
func del(_ text: String) -> Diff { Diff(.delete, text) }
func ins(_ text: String) -> Diff { Diff(.insert, text) }

func units(_ text: String) -> [UInt16] { Array(text.utf16) }

func string(_ units: [UInt16]) -> String { String(decoding: units, as: UTF16.self) }

func diffs(_ unitDiffs: [UnitDiff]) -> [Diff] { unitDiffs.map(\.diff) }

/// A diff run built from raw code units, for cases that cut surrogate pairs on purpose.
func rawDiff(_ operation: DiffOperation, _ codeUnits: [UInt16]) -> UnitDiff { UnitDiff(operation, codeUnits) }
