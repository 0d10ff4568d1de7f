/// What a string field of a signed document may hold: `.identifier` for every value that names
/// something (URLs, ids, versions, routes, paths, hashes, keys), where a control character is refused
/// before the value reaches a transport or a file system that would stop at a NUL or read it another way.
package enum StrictTextKind: Sendable { case any, identifier }

/// The field readers of the signed documents (the manifest, a keys document): one reading of strings and
/// integers, and one way of naming a value in a message. A reader supplies `fail`, which builds its
/// document's error for a field.
package protocol StrictFieldReader {
    func fail(_ field: String, _ reason: String) -> OfflinePkgError
}

extension StrictFieldReader {
    package func string(_ value: JSONValue?, _ field: String, required: Bool = true, text: StrictTextKind = .any) throws
        -> String?
    {
        guard let value, !value.isNull else {
            if required { throw fail(field, "missing") }
            return nil
        }
        guard let string = value.string else { throw fail(field, "expected a string, got \(describe(value))") }
        if text == .identifier, let control = string.unicodeScalars.first(where: Self.isControl) {
            throw fail(
                field,
                "\(quoted(string)) contains the control character \(TextFormat.codePoint(control)); "
                    + "control characters are never allowed here")
        }
        return string
    }

    /// An integer written as one: `1.0`, `1e3` and `1.0000000000000000001` are not integers, whatever
    /// their value, so that every reader of a signed document sees the same number or none.
    package func integer(_ value: JSONValue?, _ field: String, required: Bool) throws -> Int? {
        guard let value, !value.isNull else {
            if required { throw fail(field, "missing") }
            return nil
        }
        guard let (literal, isInteger) = value.number else { throw fail(field, "expected an integer, got \(describe(value))") }
        guard isInteger else { throw fail(field, "expected an integer, got \(literal), which is not an integer") }
        guard let integer = Int(literal) else {
            throw fail(field, "expected an integer, got \(literal), a number too large for 64 bits")
        }
        return integer
    }

    package func describe(_ value: JSONValue) -> String {
        switch value.kind {
        case .null: "null"
        case .boolean: "a boolean"
        case .number: "the number \(value.number!.literal)"
        case .string: "the string \(quoted(value.string!))"
        case .array: "a list"
        case .object: "an object"
        }
    }

    /// A value from the document for a message: quoted, controls and quotes escaped, cut at 200 characters.
    package func quoted(_ text: String) -> String {
        let cut = text.unicodeScalars.count > 200 ? String(String.UnicodeScalarView(text.unicodeScalars.prefix(200))) + "…" : text
        return "\"" + OfflinePkgError.escaped(cut) + "\""
    }

    package static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7f...0x9f).contains(scalar.value)
    }
}
