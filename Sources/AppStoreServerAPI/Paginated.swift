/// Pages of a paginated endpoint as an `AsyncSequence`: the first page, then each next page with the
/// continuation token (and the same filters), until the App Store says there are no more.
package struct Paginated<Page: Sendable>: AsyncSequence, Sendable {
    package typealias Element = Page
    package typealias Failure = AppStoreServerAPIError

    /// Fetches the page after `token` (`nil`: the first) and returns it with the next token, or `nil` at the end.
    let fetch: @Sendable (String?) async throws(AppStoreServerAPIError) -> (Page, String?)

    /// One page: the page after `token` (`nil`: the first), and the token of the next one (`nil`: this was the last),
    /// for callers that act on page boundaries (commit a page, remember how far they got).
    package func page(after token: String?) async throws(AppStoreServerAPIError) -> (page: Page, next: String?) {
        try await fetch(token)
    }

    package func makeAsyncIterator() -> Iterator {
        Iterator(fetch: fetch)
    }

    package struct Iterator: AsyncIteratorProtocol {
        let fetch: @Sendable (String?) async throws(AppStoreServerAPIError) -> (Page, String?)
        var token: String? = nil
        var finished = false

        package mutating func next() async throws(AppStoreServerAPIError) -> Page? {
            guard !finished else { return nil }
            let (page, next) = try await fetch(token)
            token = next
            finished = next == nil
            return page
        }
    }

    /// Every page, collected.
    package func all() async throws(AppStoreServerAPIError) -> [Page] {
        var pages: [Page] = []
        var iterator = makeAsyncIterator()
        while let page = try await iterator.next() { pages.append(page) }
        return pages
    }
}
